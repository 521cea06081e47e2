"""Single source: generate the student's stubs in assignments/ from solutions/.

In a solution file, every region a student writes is fenced:

    def ring_allreduce(tensor, group=None):
        \"\"\"Docstring: the spec the student reads.\"\"\"
        ### BEGIN SOLUTION
        ...
        ### END SOLUTION

Inside a function the region becomes `raise NotImplementedError(...)` naming the function, the
file and the lecture section. A region at module level (private helpers of the reference) is
dropped, leaving a comment where the student may put helpers of their own. Everything outside
the fences (imports, signatures, docstrings, helpers given to the student) is copied as is.
"""

from __future__ import annotations

import ast
import difflib
from dataclasses import dataclass
from pathlib import Path

from grader.course import Course, Module

BEGIN = "### BEGIN SOLUTION"
END = "### END SOLUTION"
HEADER = (
    "# Your working copy: replace every `raise NotImplementedError` with your implementation.\n"
    "# (Generated from the course's reference by `python -m grader sync`.)\n"
)
HELPERS_COMMENT = "# (Write any helper functions you need here.)\n"


class SyncError(Exception):
    """A solution file's fences are malformed."""


@dataclass(frozen=True)
class StubFile:
    source: Path
    target: Path
    text: str


def _enclosing_functions(tree: ast.Module) -> list[tuple[int, int, str]]:
    """(first line, last line, name) of every function, innermost listed last; methods are
    named with their class ("PagedKVCache.append"), so the stub says what to implement."""
    spans = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                spans.append((child.lineno, child.end_lineno or child.lineno, prefix + child.name))
                visit(child, prefix)
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, prefix)

    visit(tree, "")
    return sorted(spans, key=lambda span: (span[0], -span[1]))


def _function_at(spans: list[tuple[int, int, str]], line: int) -> str | None:
    inside = [name for first, last, name in spans if first <= line <= last]
    return inside[-1] if inside else None


def make_stub(source: str, *, module: Module, origin: str, only: str | None = None) -> str:
    """The stub text for one solution file (`origin` names it in error messages). With `only`
    (a function's name, "Class.method" for a method), only that function's fences become the
    stub and every other fence keeps its solution: the reference with one function left to write."""
    try:
        spans = _enclosing_functions(ast.parse(source))
    except SyntaxError as error:
        raise SyncError(f"{origin}: {error}") from None
    out: list[str] = [HEADER]
    fence_start: int | None = None
    for number, line in enumerate(source.splitlines(keepends=True), start=1):
        stripped = line.strip()
        if only is not None and fence_start is None and _function_at(spans, number) != only:
            out.append(line)  # another function's fence (or its code): the solution stays
            continue
        if stripped == BEGIN:
            if fence_start is not None:
                raise SyncError(f"{origin}:{number}: {BEGIN} inside another fence")
            fence_start = number
            indent = line[: len(line) - len(line.lstrip())]
            function = _function_at(spans, number)
            if function is None:
                out.append(indent + HELPERS_COMMENT)
            else:
                out.append(f'{indent}raise NotImplementedError("{_instruction(module, function)}")\n')
        elif stripped == END:
            if fence_start is None:
                raise SyncError(f"{origin}:{number}: {END} without {BEGIN}")
            fence_start = None
        elif fence_start is None:
            out.append(line)
    if fence_start is not None:
        raise SyncError(f"{origin}:{fence_start}: {BEGIN} is never closed")
    return "".join(out)


def fenced_functions(source: str) -> list[str]:
    """The functions (and methods, "Class.method") of a solution file that hold a fence: what a
    student writes in it, in file order."""
    spans = _enclosing_functions(ast.parse(source))
    found = [_function_at(spans, n) for n, line in enumerate(source.splitlines(), 1) if line.strip() == BEGIN]
    return list(dict.fromkeys(name for name in found if name is not None))


def _instruction(module: Module, function: str) -> str:
    spec = module.functions.get(function) or module.functions.get(function.split(".")[0])
    section = f", section {spec.section.split('.')[0]}" if spec else ""
    return f"implement {function} ({module.lecture}{section})"


def stubs(course: Course, modules: list[str] | None = None) -> list[StubFile]:
    """Every stub file of `modules` (default: all), generated in memory."""
    result = []
    for name in modules or list(course.modules):
        module = course.module(name)
        for file in module.files:
            source = course.root / "solutions" / name / file
            if not source.is_file():
                raise SyncError(f"course.toml lists {source.relative_to(course.root)}, which is missing")
            origin = str(source.relative_to(course.root))
            text = make_stub(source.read_text(), module=module, origin=origin)
            result.append(StubFile(source, course.root / "assignments" / name / file, text))
    return result


def stale(course: Course) -> list[str]:
    """A diff summary for each stub in assignments/ that differs from its solution."""
    problems = []
    for stub in stubs(course):
        current = stub.target.read_text() if stub.target.is_file() else ""
        if current != stub.text:
            diff = difflib.unified_diff(
                current.splitlines(), stub.text.splitlines(), str(stub.target), "generated", lineterm="", n=0
            )
            problems.append("\n".join(list(diff)[:12]))
    return problems


def write_stubs(course: Course, modules: list[str] | None = None) -> list[Path]:
    """Write the stubs; return the files that changed."""
    changed = []
    for stub in stubs(course, modules):
        if not stub.target.is_file() or stub.target.read_text() != stub.text:
            stub.target.parent.mkdir(parents=True, exist_ok=True)
            stub.target.write_text(stub.text)
            changed.append(stub.target)
    return changed
