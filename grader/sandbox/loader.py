"""Importing a submission's files by name, one file at a time (runs inside the worker).

A file that fails to import fails only the functions that live in it; the failure is kept and
reported again on every later call instead of re-running the broken import.
"""

from __future__ import annotations

import importlib
import os
import sys
import traceback
from pathlib import Path
from types import ModuleType
from typing import Any

from grader.sandbox.given import GIVEN_PREFIX, GivenCodeFinder


class LoadError(Exception):
    """A submission file could not be imported, or lacks the requested function."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind  # "import" or "missing"


def _is_given(filename: str) -> bool:
    return filename.startswith(GIVEN_PREFIX)


def student_traceback(error: BaseException, directory: Path) -> str:
    """The traceback of `error` restricted to frames in the student's files and the course's
    given code in them (plus the last): an error raised in given code shows which of the
    student's calls led there."""
    frames = traceback.extract_tb(error.__traceback__)
    mine = [f for f in frames if _is_given(f.filename) or Path(f.filename).resolve().is_relative_to(directory)]
    if frames and frames[-1] not in mine:
        mine.append(frames[-1])
    for frame in mine:
        if _is_given(frame.filename):  # the student edited it: its line is the pristine stub's
            frame.filename = f"{frame.filename[len(GIVEN_PREFIX) : -1]} (the course's given code)"
    lines = traceback.format_list(mine) + traceback.format_exception_only(type(error), error)
    # Paths relative to the submission's root: "collectives/ring.py", not a grader's temp folder.
    return "".join(lines).rstrip().replace(f"{directory.parent}{os.sep}", "")


class SubmissionLoader:
    """Imports `<directory>/<file>.py` as top-level module `<file>` on first use."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory.resolve()
        sys.path.insert(0, str(self.directory))
        self._failures: dict[str, LoadError] = {}
        self._given: GivenCodeFinder | None = None

    def module(self, file: str) -> ModuleType:
        stem = Path(file).stem
        if stem in self._failures:
            raise self._failures[stem]
        if not (self.directory / f"{stem}.py").is_file():
            self._failures[stem] = LoadError("import", f"{file} is missing from the submission")
            raise self._failures[stem]
        try:
            return importlib.import_module(stem)
        except BaseException as error:
            sys.modules.pop(stem, None)
            detail = student_traceback(error, self.directory)
            self._failures[stem] = LoadError("import", f"importing {file} failed:\n{detail}")
            raise self._failures[stem] from None

    def use_given(self, given: dict[str, str]) -> None:
        """From now on, every import of a submission file runs the course's given code of that
        file (`given`: file name -> code) right after the file's own code. Called before the
        first import."""
        if self._given is None:
            self._given = GivenCodeFinder(self.directory, given)
            sys.meta_path.insert(0, self._given)

    def function(self, file: str, name: str) -> Any:
        module = self.module(file)
        function = getattr(module, name, None)
        if not callable(function):
            raise LoadError("missing", f"{file} defines no function {name}()")
        return function
