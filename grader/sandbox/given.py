"""The course's given code, re-installed over the student's copy of it (grader side + worker side).

A student's file holds code the course gives (models, the helpers that train with the student's
classes and count bytes for the grader). The student can edit that code like any other line, so
a helper that reports a count could be rewritten to report anything. The grader therefore takes
the given definitions from the course's own copy of the file, never from the student's working
copy: the stub generated from solutions/ in the course's repository, or in a student's template
(`grader release`) the pristine stubs the release ships in grader/given/<module>/. The worker
executes them in the student's module right after the module's own code runs, however it is
imported: by the grader, or by another of the student's files (`from reference import
check_shapes`). Every name bound to a given definition, anywhere, is the course's, whatever order
the tests call the files in.

Given = every top-level function or class of the stub whose body is not a "write this" stub.
Given code still calls the student's functions and classes, which is the point.

Where it shows in a report: a given definition the student left as the course wrote it is
compiled under the student's file name at the line where it stands in that file, so a traceback
or a hang points at the student's own file and line. One the student edited runs as the course
wrote it and is shown as `ring.py (the course's given code)` at its line in the pristine stub.
"""

from __future__ import annotations
import __future__

import ast
import importlib.abc
import importlib.machinery
import importlib.util
import linecache
from functools import cache
from pathlib import Path
from types import ModuleType

from grader.course import COURSE_ROOT, load_course

_STUB_MARK = "NotImplementedError("
# Where a release keeps the pristine stubs (a student's template has no solutions/ to make them from).
PRISTINE = Path("grader") / "given"
GIVEN_FILE = "<given code of {file}>"  # the file name an edited given definition is compiled under
GIVEN_PREFIX = GIVEN_FILE.partition("{")[0]


@cache
def given_code(module: str, file: str, root: Path = COURSE_ROOT) -> str:
    """Source of the given top-level definitions of `file` in `module` ("" if none), each at
    the line it has in the stub (every other line left blank), so that line numbers in it are
    the stub's."""
    text = _trusted_stub(module, file, root)
    if text is None:
        return ""
    lines = text.splitlines()
    kept = [""] * len(lines)
    for node in ast.parse(text).body:
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        first = _first_line(node)
        segment = lines[first - 1 : node.end_lineno]
        if _STUB_MARK not in "\n".join(segment):
            kept[first - 1 : node.end_lineno] = segment
    code = "\n".join(kept).rstrip("\n")
    return code + "\n" if code.strip() else ""


@cache
def given_names(module: str, file: str, root: Path = COURSE_ROOT) -> frozenset[str]:
    """The names `given_code` defines: the student's definitions of them never run."""
    code = given_code(module, file, root)
    return frozenset(node.name for node in ast.parse(code).body if hasattr(node, "name"))


def _first_line(node: ast.stmt) -> int:
    return min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])


def _trusted_stub(module: str, file: str, root: Path) -> str | None:
    """The stub as the course wrote it: made from solutions/, or the copy a release ships. Never
    the student's assignments/, which is their working copy."""
    if (root / "solutions" / module / file).is_file():
        from grader.sync import make_stub

        course = load_course(root)
        source = root / "solutions" / module / file
        return make_stub(source.read_text(), module=course.module(module), origin=str(source.relative_to(root)))
    pristine = root / PRISTINE / module / file
    return pristine.read_text() if pristine.is_file() else None


def install_given(module: ModuleType, code: str, file: str) -> None:
    """Run the course's given definitions in the student's `module` (worker side), each under
    the student's file name and line where the student's file holds it unchanged."""
    flags = __future__.annotations.compiler_flag  # annotations stay strings, as in the stub
    given_file = GIVEN_FILE.format(file=file)
    code_lines = code.splitlines(keepends=True)
    linecache.cache[given_file] = (len(code), None, code_lines, given_file)  # tracebacks show its lines
    path = getattr(module, "__file__", None)
    student = _unchanged_definitions(code_lines, Path(path)) if path else {}
    for node in ast.parse(code).body:
        at = student.get(getattr(node, "name", ""))
        if at is None:
            filename = given_file
        else:
            filename = path
            ast.increment_lineno(node, at - _first_line(node))
        tree = ast.Module(body=[node], type_ignores=[])
        exec(compile(tree, filename, "exec", flags=flags, dont_inherit=True), module.__dict__)


def given_spans(module: str, path: Path) -> list[tuple[int, int]]:
    """(first, last) lines of the student's file `path` (of `module`) that hold a given definition
    left as the course wrote it: code that runs under the student's file name but is the
    course's (grader side, to tell the student's own frames from the given helpers around them)."""
    code = given_code(module, path.name)
    if not code:
        return []
    spans = {node.name: node.end_lineno - _first_line(node) for node in ast.parse(code).body if hasattr(node, "name")}
    found = _unchanged_definitions(code.splitlines(keepends=True), path)
    return [(first, first + spans[name]) for name, first in found.items()]


def _unchanged_definitions(given_lines: list[str], path: Path) -> dict[str, int]:
    """{name: its first line in the student's file} for the top-level definitions of the
    student's file that are, line for line, the course's given definition of that name."""
    try:
        text = path.read_text()
        tree = ast.parse(text)
    except (OSError, SyntaxError, ValueError):
        return {}
    lines = text.splitlines(keepends=True)
    given = {}
    for node in ast.parse("".join(given_lines)).body:
        if hasattr(node, "name"):
            given[node.name] = _normalised(given_lines[_first_line(node) - 1 : node.end_lineno])
    found = {}
    for node in tree.body:
        name = getattr(node, "name", None)
        if name in given and _normalised(lines[_first_line(node) - 1 : node.end_lineno]) == given[name]:
            found[name] = _first_line(node)
    return found


def _normalised(lines: list[str]) -> list[str]:
    return [line.rstrip() for line in lines]


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
