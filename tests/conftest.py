"""Shared helpers for the project's own tests: run the grader as a user would (a subprocess),
and build broken submissions from the reference solutions plus one variant file."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
VARIANTS = Path(__file__).resolve().parent / "variants"


def run_grader(*args: str, timeout: float = 900, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`python -m grader ARGS` from the repository root, output captured."""
    return subprocess.run(
        [sys.executable, "-m", "grader", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


class GradingServer:
    """tests/grading_server.py: `python -m grader ARGS` answered by one process for the session."""

    def __init__(self) -> None:
        self.log = tempfile.TemporaryFile()  # noqa: SIM115 - open for the life of the server
        self.process = subprocess.Popen(
            [sys.executable, str(ROOT / "tests" / "grading_server.py")],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
        )

    def run(self, args: list[str], timeout: float) -> tuple[int, str]:
        """The exit status of `python -m grader ARGS`, and what it wrote to standard error."""
        start = self.log.seek(0, os.SEEK_END)
        self.process.stdin.write(json.dumps(args) + "\n")
        self.process.stdin.flush()
        timer = threading.Timer(timeout, self.process.kill)
        timer.start()
        try:
            while (line := self.process.stdout.readline()) and not line.startswith("GRADED "):
                continue
        finally:
            timer.cancel()
        self.log.seek(start)
        stderr = self.log.read().decode(errors="replace")
        if not line:
            raise AssertionError(f"the grading server died (or ran past {timeout:g} s):\n{stderr[-3000:]}")
        return int(line.split()[1]), stderr

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=60)
        self.log.close()


_server: list[GradingServer] = []


@pytest.fixture(scope="session", autouse=True)
def _close_the_grading_server():
    yield
    for server in _server:
        server.close()


def grade_json(submission: Path | str, *args: str, out: Path, timeout: float = 900) -> dict:
    """Grade and return the Gradescope-shaped results; fail with the grader's output if it broke.
    Runs `python -m grader grade` in the session's grading server (the CLI, in one process)."""
    if not _server or _server[0].process.poll() is not None:
        _server[:] = [GradingServer()]
    command = ["grade", "--submission", str(submission), "--format", "json", "--out", str(out), *args]
    code, stderr = _server[0].run(command, timeout)
    assert code == 0, f"grader exited {code}:\n{stderr[-3000:]}"
    return json.loads(out.read_text())


def by_name(results: dict) -> dict[str, dict]:
    """Tests of a Gradescope result keyed by their name without the module prefix."""
    return {t["name"].split(": ", 1)[1]: t for t in results["tests"]}


def module_results(results: dict, module: str) -> dict[str, dict]:
    """One module's tests of a Gradescope result (e.g. the session's solutions_results), by name."""
    return {t["name"].split(": ", 1)[1]: t for t in results["tests"] if t["name"].startswith(f"{module}: ")}


def measured(test: dict) -> dict:
    """A timed check's result; the calling test is skipped, with the reason, when the machine was
    too busy to time it (grader/perf.py): a timed check can be proved both ways only when it can
    be measured, and it must never get the wrong verdict."""
    if test["output"].startswith("not measured reliably"):
        pytest.skip(f"{test['name']}: {test['output']}")
    return test


def build_variant(module: str, variant: str, root: Path) -> Path:
    """A submission folder: solutions/<module> with tests/variants/<module>/<variant>.py appended
    to the file its `# target:` line names (later definitions override the reference's)."""
    code = (VARIANTS / module / f"{variant}.py").read_text()
    target = next(line.split(":", 1)[1].strip() for line in code.splitlines() if line.startswith("# target:"))
    folder = root / module
    shutil.copytree(ROOT / "solutions" / module, folder)
    with open(folder / target, "a") as file:
        file.write(f"\n\n# ---- variant {variant} ----\n{code}")
    return root


@pytest.fixture(scope="session")
def solutions_results(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The reference solutions graded in full (public + hidden + performance)."""
    return grade_json(ROOT / "solutions", out=tmp_path_factory.mktemp("solutions") / "results.json")


@pytest.fixture(scope="session")
def stubs_results(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The generated stubs (assignments/) graded in full."""
    return grade_json(ROOT / "assignments", out=tmp_path_factory.mktemp("stubs") / "results.json")
