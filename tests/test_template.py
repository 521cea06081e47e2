"""The student's template is a product: a release written into a temporary folder and worked in
as a student does, with the release's own grader (grader/delivery/release.py).

Three modules, each a kind of exercise: quantization (single-process functions), collectives
(point-to-point ranks) and serving (a class whose notebook drives it as a remote object). The
student solves them, saves a break, then saves the fix, while `watch` runs on each module. At
every state plain pytest on the public tests, `grade --public-only` and watch must give the same
verdict per test, and every place a report names in the student's files (file and line, in a
traceback or a hang) must be a line of that function in the student's file as it is now: the
break moves the file's lines down, so a location read from anywhere else points elsewhere.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from conftest import ROOT, run_grader
from test_watch import _until

# module -> (file, the student's function to break: "Class.method" for a method)
BROKEN = {
    "quantization": ("integer.py", "dequantize"),
    "collectives": ("ring.py", "ring_reduce_scatter"),
    "serving": ("scheduler.py", "Scheduler.step"),
}
SHIFT = "# three lines the student added at the top of the file\n#\n#\n"
BREAK = "raise RuntimeError('broken on purpose')"
FAILED_NAME = re.compile(r"^\s+x (test_\S+)\s+\(public\)", re.MULTILINE)  # a long name wraps before "(public)"
LOCATION = re.compile(r'File "(?P<module>\w+)/(?P<file>\w+\.py)", line (?P<line>\d+), in (?P<function>\w+)')
CHAIN = re.compile(r"(?P<file>\w+\.py):(?P<line>\d+) in (?P<function>\w+)\(\)")


@pytest.fixture(scope="module")
def student(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh release, as the student clones it, with the three modules solved."""
    out = tmp_path_factory.mktemp("template") / "student"
    completed = run_grader("release", "--out", str(out), timeout=120)
    assert completed.returncode == 0, f"release failed:\n{completed.stderr[-2000:]}"
    for module in BROKEN:
        for path in (ROOT / "solutions" / module).glob("*.py"):
            shutil.copy(path, out / "assignments" / module / path.name)
    return out


def _environment(student: Path) -> dict[str, str]:
    """The release's own grader, whatever this repository's .venv has installed."""
    return {**os.environ, "PYTHONPATH": str(student)}


def _function_node(tree: ast.Module, qualified: str) -> ast.FunctionDef:
    scope: list[ast.stmt] = tree.body
    for part in qualified.split("."):
        (node,) = [n for n in scope if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == part]
        scope = node.body
    return node


def _broken(source: str, qualified: str) -> tuple[str, int]:
    """`source` moved three lines down, with `qualified` raising as its first statement; and
    the line of that raise."""
    shifted = SHIFT + source
    node = _function_node(ast.parse(shifted), qualified)
    first = node.body[1] if isinstance(node.body[0], ast.Expr) and len(node.body) > 1 else node.body[0]
    lines = shifted.splitlines(keepends=True)
    indent = " " * first.col_offset
    lines.insert(first.lineno - 1, f"{indent}{BREAK}\n")
    return "".join(lines), first.lineno


def _save(path: Path, text: str) -> None:
    """Save as an editor does, in one step: the new text under another name, then renamed over
    the file. Writing in place and then touching it were two changes; watch could poll between
    them, grade twice, and leave a stale verdict for the next save's to be read in its place."""
    temporary = path.with_name(path.name + ".saving")  # not *.py: watch never sees it
    temporary.write_text(text)
    os.replace(temporary, path)  # a new file: its time is the save's


def _pytest_failures(student: Path) -> dict[str, set[str]]:
    """Plain pytest on the three modules' public tests: the failed tests per module, and its output."""
    command = [sys.executable, "-m", "pytest", *(f"assignments/{m}" for m in BROKEN), "-q", "-rf"]
    command += ["-p", "no:cacheprovider"]
    completed = subprocess.run(command, cwd=student, env=_environment(student), capture_output=True, text=True)
    assert completed.returncode in (0, 1), completed.stdout[-3000:] + completed.stderr[-3000:]
    failed: dict[str, set[str]] = {m: set() for m in BROKEN}
    for match in re.finditer(r"^FAILED assignments/(\w+)/test_\w+\.py::(\S+)", completed.stdout, re.MULTILINE):
        failed[match[1]].add(match[2])
    failed["output"] = {completed.stdout}
    return failed


def _grade_failures(student: Path) -> tuple[dict[str, set[str]], str]:
    """`grade --public-only` (as `make grade` runs it in the template): failed tests per module."""
    command = [sys.executable, "-m", "grader", "grade", *BROKEN, "--public-only", "--format", "json"]
    completed = subprocess.run(command, cwd=student, env=_environment(student), capture_output=True, text=True)
    assert completed.returncode == 0, completed.stderr[-3000:]
    failed: dict[str, set[str]] = {m: set() for m in BROKEN}
    messages = []
    for test in json.loads(completed.stdout)["tests"]:
        module, _, name = test["name"].partition(": ")
        if test["status"] != "passed":
            failed[module].add(name)
            messages.append(test["output"])
    return failed, "\n".join(messages)


def _assert_locations_are_the_students(student: Path, text: str) -> int:
    """Every `File "m/f.py", line N, in F` and `f.py:N in F()` in `text` that names one of the
    student's files is a line of F in that file as it is now; returns how many were checked."""
    checked = 0
    for match in [*LOCATION.finditer(text), *CHAIN.finditer(text)]:
        modules = [match["module"]] if "module" in match.groupdict() else list(BROKEN)
        paths = [student / "assignments" / m / match["file"] for m in modules]
        path = next((p for p in paths if p.is_file()), None)
        if path is None:  # not a student's file (a test's, torch's)
            continue
        line, function = int(match["line"]), match["function"]
        spans = [
            (n.lineno, n.end_lineno)
            for n in ast.walk(ast.parse(path.read_text()))
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == function
        ]
        assert any(first <= line <= last for first, last in spans), (
            f"a report names {match[0]!r}, but line {line} of the student's {path.name} is not in {function}(): "
            f"{path.read_text().splitlines()[line - 1]!r}"
        )
        checked += 1
    return checked


def test_a_release_gives_the_verdicts_and_locations_of_plain_pytest_in_grade_and_watch(student):
    """Solve, break (an exception three lines lower in the file), fix: in each state plain
    pytest, grade --public-only and watch fail exactly the same tests, and every location they
    report in the student's files is a line of the named function there. Before a release
    shipped the pristine stubs, the student's first (solved) functions were taken for given
    code and re-installed over every later save: watch passed the break."""
    env = _environment(student)
    watches = {
        module: subprocess.Popen(
            [sys.executable, "-m", "grader", "watch", module, "--max-gradings", "3"],
            cwd=student,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for module in BROKEN
    }
    sources = {m: (student / "assignments" / m / f).read_text() for m, (f, _) in BROKEN.items()}
    try:

        def verdicts() -> dict[str, str]:
            with ThreadPoolExecutor(len(watches)) as pool:
                futures = {m: pool.submit(_until, w.stdout, "watching", 240) for m, w in watches.items()}
                return {m: future.result() for m, future in futures.items()}

        solved = verdicts()
        for module, text in solved.items():
            assert "100.0 / 100" in text and not FAILED_NAME.search(text), f"{module}, solved:\n{text}"

        lines = {}
        for module, (file, function) in BROKEN.items():
            text, lines[module] = _broken(sources[module], function)
            _save(student / "assignments" / module / file, text)
        watched = verdicts()
        pytest_failed = _pytest_failures(student)
        graded, messages = _grade_failures(student)
        for module, (file, function) in BROKEN.items():
            seen = set(FAILED_NAME.findall(watched[module]))
            assert pytest_failed[module], f"plain pytest passed {module} with {function} broken"
            assert seen == pytest_failed[module] == graded[module], (
                f"{module} with {function} broken: watch failed {sorted(seen)}, plain pytest "
                f"{sorted(pytest_failed[module])}, grade --public-only {sorted(graded[module])}"
            )
            raise_at = f'File "{module}/{file}", line {lines[module]}, in {function.split(".")[-1]}'
            assert raise_at in messages, f"the raise at line {lines[module]} of {file} is not reported:\n{messages}"
        everything = "\n".join([*watched.values(), *pytest_failed["output"], messages])
        assert _assert_locations_are_the_students(student, everything) >= len(BROKEN)

        for module, (file, _) in BROKEN.items():
            _save(student / "assignments" / module / file, sources[module])
        fixed = verdicts()
        for module, text in fixed.items():
            assert "100.0 / 100" in text and not FAILED_NAME.search(text), f"{module}, fixed:\n{text}"
        assert not any(v for m, v in _pytest_failures(student).items() if m != "output")
        for watch in watches.values():
            assert watch.wait(timeout=60) == 0
    finally:
        for watch in watches.values():
            watch.kill()
