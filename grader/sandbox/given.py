"""The course's given code, re-installed over the student's copy of it (grader side + worker side).

A student's file holds code the course gives (models, the helpers that train with the student's
classes and count bytes for the grader). The student can edit that code like any other line, so
a helper that reports a count could be rewritten to report anything. The grader therefore takes
the given definitions from its own copy of the file (the stub generated from solutions/, or the
course's assignments/ where there is no solutions/) and the worker executes them in the student's
module right after the module's own code runs, however it is imported: by the grader, or by
another of the student's files (`from reference import check_shapes`). Every name bound to a
given definition, anywhere, is the course's, whatever order the tests call the files in.

Given = every top-level function or class of the stub whose body is not a "write this" stub.
Given code still calls the student's functions and classes, which is the point.
"""

from __future__ import annotations
import __future__

import ast
import importlib.abc
import importlib.machinery
import importlib.util
from functools import cache
from pathlib import Path
from types import ModuleType

from grader.course import COURSE_ROOT, load_course

_STUB_MARK = "NotImplementedError("


@cache
def given_code(module: str, file: str, root: Path = COURSE_ROOT) -> str:
    """Source of the given top-level definitions of `file` in `module`, in file order ("" if none)."""
    text = _trusted_stub(module, file, root)
    if text is None:
        return ""
    lines = text.splitlines()
    parts = []
    for node in ast.parse(text).body:
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
        segment = "\n".join(lines[first - 1 : node.end_lineno])
        if _STUB_MARK not in segment:
            parts.append(segment)
    return "\n\n\n".join(parts)


@cache
def given_names(module: str, file: str, root: Path = COURSE_ROOT) -> frozenset[str]:
    """The names `given_code` defines: the student's definitions of them never run."""
    code = given_code(module, file, root)
    return frozenset(node.name for node in ast.parse(code).body if hasattr(node, "name"))


def _trusted_stub(module: str, file: str, root: Path) -> str | None:
    if (root / "solutions" / module / file).is_file():
        from grader.sync import make_stub

        course = load_course(root)
        source = root / "solutions" / module / file
        return make_stub(source.read_text(), module=course.module(module), origin=str(source.relative_to(root)))
    stub = root / "assignments" / module / file
    return stub.read_text() if stub.is_file() else None


def install_given(module: ModuleType, code: str, file: str) -> None:
    """Run the course's given definitions in the student's `module` (worker side)."""
    flags = __future__.annotations.compiler_flag  # annotations stay strings, as in the stub
    exec(compile(code, f"<given code of {file}>", "exec", flags=flags, dont_inherit=True), module.__dict__)


class _GivenCodeLoader(importlib.machinery.SourceFileLoader):
    """Loads a student's file as usual, then runs the course's given code in it."""

    def __init__(self, name: str, path: str, given: str) -> None:
        super().__init__(name, path)
        self.given = given

    def exec_module(self, module: ModuleType) -> None:
        super().exec_module(module)
        install_given(module, self.given, Path(self.path).name)


class GivenCodeFinder(importlib.abc.MetaPathFinder):
    """Put first on sys.meta_path (worker side): every import of one of the submission's files
    that has given code, by whoever, goes through _GivenCodeLoader. A `from x import y` binds y
    only once x has run completely, so it binds the course's y."""

    def __init__(self, directory: Path, given: dict[str, str]) -> None:
        self.directory = directory
        self.given = {Path(file).stem: code for file, code in given.items() if code}

    def find_spec(self, name: str, path=None, target=None):
        if path is not None or name not in self.given:  # a submodule, or a file without given code
            return None
        file = self.directory / f"{name}.py"
        if not file.is_file():
            return None
        loader = _GivenCodeLoader(name, str(file), self.given[name])
        return importlib.util.spec_from_file_location(name, file, loader=loader)
