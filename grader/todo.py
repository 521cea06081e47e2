"""What a student writes in each module, what the course gives, and what is still to write.

course.toml lists every name the tests call; the course's own helpers among them (zero's
`make_model`, `train_ddp`) say `given = "..."`. A student's function is still to write while its
body is the stub's `raise NotImplementedError(...)`, read from the source without running it
(grader/sandbox/stubs.py), so the to-do list is the same whichever tests ran first.
"""

from __future__ import annotations

from pathlib import Path

from grader.course import Function, Module
from grader.sandbox.given import given_names
from grader.sandbox.stubs import stub_message


def split_functions(module: Module) -> tuple[list[Function], list[Function]]:
    """(the functions the student writes, the course's given ones), in the syllabus's order."""
    functions = list(module.functions.values())
    return [f for f in functions if not f.given], [f for f in functions if f.given]


def unwritten(module: Module, directory: Path) -> list[str]:
    """The student's functions whose source in `directory` is still the stub (a missing file:
    every function of it)."""
    names = []
    for function in split_functions(module)[0]:
        path = directory / function.file
        given = given_names(module.name, function.file)
        if not path.is_file() or stub_message(path, function.name, given) is not None:
            names.append(function.name)
    return names
