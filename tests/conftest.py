"""Shared helpers for the project's own tests: run the grader as a user would (a subprocess),
and build broken submissions from the reference solutions plus one variant file."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
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


def grade_json(submission: Path | str, *args: str, out: Path) -> dict:
    """Grade and return the Gradescope-shaped results; fail with the grader's output if it broke."""
    completed = run_grader("grade", "--submission", str(submission), "--format", "json", "--out", str(out), *args)
    assert completed.returncode == 0, f"grader exited {completed.returncode}:\n{completed.stderr[-3000:]}"
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
