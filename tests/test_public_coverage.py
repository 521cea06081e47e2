"""Public tests are for learning (grader/delivery/public_coverage.py): every function a student
writes has a public test that fails while it alone is the stub, and every distributed module's
public tests run a world of 4 ranks and, where its hidden suite does, a subgroup."""

from __future__ import annotations

import subprocess
from pathlib import Path

from conftest import ROOT, prefetched, run_grader

from grader.course import load_course
from grader.sync import fenced_functions, make_stub


def _coverage_of_every_module(folder: Path) -> subprocess.CompletedProcess:
    return run_grader("public-coverage", timeout=1800)


coverage_of_every_module = prefetched(_coverage_of_every_module)


def test_make_stub_with_only_leaves_that_one_function_to_write_and_keeps_every_other_solution():
    module = load_course().module("serving")
    source = (ROOT / "solutions" / "serving" / "scheduler.py").read_text()
    assert fenced_functions(source)[:3] == ["Scheduler.__init__", "Scheduler.add_request", "Scheduler.step"]
    stub = make_stub(source, module=module, origin="scheduler.py", only="Scheduler.step")
    assert stub.count("raise NotImplementedError(") == 1, "only Scheduler.step becomes the stub"
    assert 'raise NotImplementedError("implement Scheduler.step' in stub
    assert stub.count("### BEGIN SOLUTION") == source.count("### BEGIN SOLUTION") - 1, "the other fences stay"


def test_a_function_whose_stub_no_public_test_catches_is_reported(monkeypatch):
    """Proved the other way: a 'function' whose stub changes nothing (no such name in the file,
    so the file stays the reference) is caught by no test and reported; collectives' real
    functions are caught, and the worlds its public tests start are recorded."""
    import grader.delivery.public_coverage as tool

    monkeypatch.setattr(tool, "fenced_functions", lambda source: [*fenced_functions(source), "no_such_function"])
    coverage = tool.public_coverage(load_course(), "collectives")
    assert coverage.uncovered == ["ring.py:no_such_function", "cost_model.py:no_such_function"], coverage.caught
    assert all(tests for name, tests in coverage.caught.items() if "no_such" not in name), coverage.caught
    assert {2, 4} <= coverage.world_sizes and coverage.needs_subgroup, coverage


def test_every_student_function_has_a_public_test_that_fails_while_it_is_the_stub(tmp_path_factory):
    """`python -m grader public-coverage` over the whole course: exit 0 and no line 'not covered'
    (a function no public test catches, a distributed module without a world of 4 or a subgroup)."""
    completed = coverage_of_every_module(tmp_path_factory)
    report = completed.stdout + completed.stderr[-3000:]
    assert completed.returncode == 0 and "not covered" not in report, report
    modules = [line.split(":")[0] for line in completed.stdout.splitlines() if "functions covered" in line]
    assert modules == list(load_course().modules), f"every module is checked:\n{report}"
