"""The reference solutions get full marks; the generated stubs get zero, each failure naming the
function to implement and its file; the CLI's exit status and messages."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, by_name, run_grader

from grader.course import load_course


def test_solutions_get_full_marks_on_every_module(solutions_results, reference_timed_results):
    """Full marks. The full grading runs beside the corpus, where the timed checks mostly give
    no verdict (and no points): those must pass where they were graded alone, on a quiet machine
    (reference_timed_results), and every other check must pass in the full grading."""
    tests = solutions_results["tests"]
    unmeasured = [t for t in tests if t["extra_data"]["kind"] == "unmeasured"]
    failed = [f"{t['name']}: {t['output'][:300]}" for t in tests if t["status"] != "passed" and t not in unmeasured]
    assert not failed, "the reference fails:\n" + "\n".join(failed)
    alone = {t["name"]: t for t in reference_timed_results["tests"]}
    for test in unmeasured:
        quiet = alone[test["name"]]
        if quiet["extra_data"]["kind"] == "unmeasured":
            pytest.skip(f"{test['name']} was not measured, even alone: {quiet['output']}")
        assert quiet["status"] == "passed", f"{test['name']}, graded alone: {quiet['output'][:300]}"
    # An unmeasured check's share counts: it passed where it was measured.
    points = sum(m.points for m in load_course().modules.values())
    assert solutions_results["score"] + sum(t["max_score"] for t in unmeasured) == points


def test_every_module_has_public_and_hidden_tests(solutions_results):
    for module in load_course().modules:
        suites = {t["extra_data"]["suite"] for t in solutions_results["tests"] if t["name"].startswith(module)}
        assert suites == {"public", "hidden"}, f"{module} has suites {suites}"


def test_stubs_score_zero_and_name_the_function_and_file(stubs_results):
    assert stubs_results["score"] == 0
    course = load_course()
    for test in stubs_results["tests"]:
        assert test["status"] == "failed", test["name"]
        assert test["extra_data"]["kind"] == "not_implemented", f"{test['name']}: {test['output']}"
        module = course.module(test["name"].split(":")[0])
        pattern = r"\b{}(\.\w+)? is not implemented yet"
        named = [f for f in module.functions.values() if re.search(pattern.format(f.name), test["output"])]
        assert named, f"{test['name']} does not name a function: {test['output']}"
        assert f"implement it in assignments/{module.name}/{named[0].file}" in test["output"], test["output"]


def test_scores_are_shared_by_weight_within_a_module(solutions_results):
    tests = by_name(solutions_results)
    unit = tests["test_allreduce_time_ring_formula"]["max_score"]
    timed = tests["test_ring_allreduce_time_within_3x_gloo_all_reduce"]["max_score"]
    # Each share is its quota rounded to the 1/1024 grid (either way): 4 units can be 4/1024 off,
    # and the 4-weight share 1/1024 more.
    assert timed == pytest.approx(4 * unit, abs=5 / 1024)


@pytest.mark.parametrize("graded", ["solutions_results", "stubs_results"])
def test_per_test_points_add_up_exactly_to_each_module_and_the_total(graded, request):
    """With `==`, as GitHub Classroom's reporter and Gradescope add them: float sums of the
    per-test points, in the payload's order and in reverse (grader/points.py)."""
    results = request.getfixturevalue(graded)
    course = load_course()
    for name, module in course.modules.items():
        tests = [t for t in results["tests"] if t["name"].startswith(f"{name}: ")]
        assert sum(t["max_score"] for t in tests) == sum(t["max_score"] for t in reversed(tests)) == module.points, name
    assert sum(t["score"] for t in results["tests"]) == results["score"]
    assert sum(t["max_score"] for t in results["tests"]) == sum(m.points for m in course.modules.values())


def test_text_scoreboard_for_a_fresh_clone_is_a_table_not_a_traceback():
    completed = run_grader("grade", "collectives", "--no-perf")
    assert completed.returncode == 0, completed.stderr
    out = completed.stdout
    assert "Traceback" not in out + completed.stderr
    assert "0.0 / 100" in out and "total" in out  # one module of a fresh clone
    for function in ("ring_allreduce", "ring_reduce_scatter", "ring_allgather", "allreduce_time"):
        assert function in out
    assert "implement it in assignments/collectives/ring.py" in out
    assert "note: performance checks were skipped" in out


def test_unknown_module_is_a_one_line_error_with_status_2():
    completed = run_grader("grade", "no_such_module")
    assert completed.returncode == 2
    modules = ", ".join(load_course().modules)
    assert completed.stderr.strip() == f"grader: unknown module 'no_such_module' (modules: {modules})"


def test_missing_submission_folder_is_a_one_line_error_with_status_2():
    completed = run_grader("grade", "--submission", "no/such/folder")
    assert completed.returncode == 2
    assert completed.stderr.strip() == "grader: submission folder 'no/such/folder' does not exist"


def test_invalid_select_expression_is_a_one_line_error_with_status_2():
    completed = run_grader("grade", "--select", "world=3")
    assert completed.returncode == 2
    assert completed.stderr.strip().splitlines()[-1].startswith("grader: pytest refused the arguments")


def test_list_prints_the_syllabus():
    completed = run_grader("list")
    assert completed.returncode == 0
    for function in load_course().module("collectives").functions:
        assert function in completed.stdout


@pytest.fixture(scope="module")
def straight_pytest_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess, Path]:
    """A student's `pytest` over the stubs' public tests of collectives and one of reliability
    (whose test file makes a scratch folder: grader/sandbox/scratch.py), in one process with a
    TMPDIR of its own: (the run, that TMPDIR). One run serves the two tests below."""
    temporary = tmp_path_factory.mktemp("straight-pytest")
    command = [sys.executable, "-m", "pytest", "assignments/collectives", "assignments/reliability", "-q"]
    command += ["-k", "collectives or youngs", "-p", "no:cacheprovider"]
    env = {**os.environ, "TMPDIR": str(temporary)}
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300, env=env), temporary


def test_public_tests_run_straight_with_pytest_against_the_stubs(straight_pytest_run):
    """A student's `pytest assignments/collectives`: runs, fails with the instruction, no crash."""
    completed, _ = straight_pytest_run
    assert completed.returncode == 1, completed.stdout[-2000:]
    assert "ring_allreduce is not implemented yet: implement it in assignments/collectives/ring.py" in completed.stdout
    assert "INTERNALERROR" not in completed.stdout


def test_public_tests_run_straight_with_pytest_leave_no_folder_behind(straight_pytest_run):
    """A student's `pytest assignments/reliability` ends with a quick exit (no atexit): the folder
    its tests hand to workers (grader/sandbox/scratch.py, in TMPDIR) is removed all the same."""
    completed, temporary = straight_pytest_run
    ran = "FAILED assignments/reliability/test_reliability.py::test_youngs"
    assert ran in completed.stdout and "job_mtbf_s is not implemented yet" in completed.stdout, completed.stdout[-2000:]
    assert not list(temporary.glob("grader-scratch-*")), f"left behind in TMPDIR: {sorted(temporary.iterdir())}"


def test_public_tests_run_the_files_of_the_checkout_they_are_in(tmp_path):
    """A copied checkout's `pytest assignments/<m>` tests the copy's files, not those of the
    checkout the environment was installed from, and says where the grader itself comes from."""
    copy = tmp_path / "moved" / "assignments" / "collectives"
    shutil.copytree(ROOT / "assignments" / "collectives", copy, ignore=shutil.ignore_patterns("*.ipynb"))
    shutil.copy(ROOT / "solutions" / "collectives" / "cost_model.py", copy / "cost_model.py")
    command = [sys.executable, "-m", "pytest", str(copy), "-k", "allreduce_time", "-p", "no:cacheprovider"]
    completed = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stdout[-3000:]
    assert "passed" in completed.stdout and "reinstall here" in completed.stdout, completed.stdout[-3000:]
