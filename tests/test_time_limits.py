"""A call's time limit follows the reference's time on the same call (grader/sandbox/limits.py):
an infinite loop costs seconds, and a correct call slower than the floor still finishes.

The calls here run with a floor of QUICK_FLOOR_S instead of the grader's FLOOR_S, so that a loop
that never ends costs this file 3 s, not 10; the grader's own margins are checked as numbers."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from grader.course import Function, Module
from grader.sandbox import Submission, SubmissionError
from grader.sandbox.limits import FACTOR, FLOOR_S, ReferenceLimit

STUDENT = """
import time


def count_up(n):
    while True:
        n += 1


def wait_a_little(seconds):
    time.sleep(seconds)
    return seconds


def outlast_the_reference(seconds):
    time.sleep(seconds)
    return seconds
"""
REFERENCE = """
import time


def count_up(n):
    return n


def wait_a_little(seconds):
    time.sleep(seconds / 8)
    return seconds


def outlast_the_reference(seconds):
    time.sleep(4 * seconds)
    return seconds
"""
CEILING_S = 30.0
QUICK_FLOOR_S = 3.0
FUNCTIONS = ("count_up", "wait_a_little", "outlast_the_reference")


def probe_submission(root: Path) -> Submission:
    """A student's probe.py graded with a reference of its own (limits.py's `measure`)."""
    for name, code in (("student", STUDENT), ("reference", REFERENCE)):
        (root / name).mkdir()
        (root / name / "probe.py").write_text(code)
    functions = {n: Function(n, "probe.py", "1. Probe") for n in FUNCTIONS}
    module = Module("probe", "Probe", "lectures/probe.md", 1, ("probe.py",), functions, CEILING_S, 1024)
    return Submission(module, root / "student", reference=root / "reference")


@pytest.fixture(scope="module")
def probe(tmp_path_factory) -> Submission:
    submission = probe_submission(tmp_path_factory.mktemp("limits"))
    yield submission
    submission.close()


@pytest.fixture(autouse=True)
def quick_floor(monkeypatch) -> None:
    monkeypatch.setattr("grader.sandbox.limits.FLOOR_S", QUICK_FLOOR_S)


@pytest.fixture
def thread_errors(monkeypatch) -> list[str]:
    """What any thread raised and left unhandled while the test ran. Under pytest, such an
    error is formatted inside the thread, which on Python 3.11 runs ast.parse beside the main
    thread's (CPython gh-106905: a SystemError in whichever parse finishes second)."""
    raised: list[str] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: raised.append(f"{args.thread.name}: {args.exc_value!r}"))
    return raised


def test_an_infinite_loop_is_stopped_at_a_multiple_of_the_reference_not_at_the_ceiling(probe):
    start = time.monotonic()
    with pytest.raises(SubmissionError) as raised:
        probe.function("count_up")(1)
    seconds = time.monotonic() - start
    assert raised.value.kind == "timeout", raised.value.message
    assert seconds < CEILING_S / 2, f"stopped after {seconds:.1f} s: the limit did not follow the reference"
    message = raised.value.message
    assert f"did not finish within {QUICK_FLOOR_S:g} s ({FACTOR:g} x the reference's" in message, message
    assert "far more than a correct solution needs" in message, message


def test_a_correct_call_longer_than_the_floor_gets_its_multiple_of_the_reference(probe):
    seconds = QUICK_FLOOR_S + 1  # the reference takes an eighth: the limit is FACTOR / 8 times this
    assert probe.function("wait_a_little")(seconds) == seconds


def test_the_limit_is_the_ceiling_until_the_reference_is_measured_and_never_above_it():
    limit = ReferenceLimit(10.0, lambda: 1.0)
    assert limit.limit_s(0.0) == 10.0
    limit.limit_s(QUICK_FLOOR_S)  # starts measuring
    limit.wait(5)
    assert limit.limit_s(QUICK_FLOOR_S) == 10.0  # 100 x 1 s, capped by the ceiling
    quick = ReferenceLimit(10.0, lambda: 0.001)
    quick.limit_s(QUICK_FLOOR_S)
    quick.wait(5)
    assert quick.limit_s(QUICK_FLOOR_S) == QUICK_FLOOR_S
    failed = ReferenceLimit(10.0, lambda: None)
    failed.limit_s(QUICK_FLOOR_S)
    failed.wait(5)
    assert failed.limit_s(QUICK_FLOOR_S) == 10.0


def test_a_correct_call_fifty_times_slower_than_the_reference_is_never_stopped(monkeypatch):
    """The margin is one no correct solution reaches: a fit_scaling_law with its own L-BFGS loop
    once took over 20 x the reference's 0.29 s and was stopped as if it looped forever. A call
    50 x slower than the reference, or a 0.01 s reference's call that takes 9 s (a loop in Python
    where the reference calls one op), must finish."""
    monkeypatch.setattr("grader.sandbox.limits.FLOOR_S", FLOOR_S)  # the grader's own, not this file's
    for reference_s, student_s, ceiling_s in ((0.29, 50 * 0.29, 60.0), (0.01, 9.0, 30.0), (0.5, 25.0, 30.0)):
        limit = ReferenceLimit(ceiling_s, lambda reference_s=reference_s: reference_s)
        limit.limit_s(FLOOR_S)
        limit.wait(5)
        assert limit.limit_s(student_s) > student_s, (
            f"a call taking {student_s:g} s where the reference takes {reference_s:g} s is stopped at "
            f"{limit.limit_s(student_s):g} s"
        )


def test_a_measure_that_raises_leaves_the_ceiling_and_raises_nothing_in_its_thread(thread_errors):
    def broken() -> float:
        raise OSError("handle is closed")

    limit = ReferenceLimit(10.0, broken)
    limit.limit_s(QUICK_FLOOR_S)
    limit.wait(5)
    assert limit.limit_s(QUICK_FLOOR_S) == 10.0
    assert thread_errors == [], f"the reference's thread raised: {thread_errors}"


def test_closing_a_submission_stops_a_reference_run_under_way_cleanly(tmp_path, thread_errors):
    """The grading ends (close) while the reference still times a call that already returned:
    its workers are killed, its thread ends without an unhandled error, and no reference world
    is started after the close (its workers would outlive the grading)."""
    submission = probe_submission(tmp_path)
    seconds = QUICK_FLOOR_S + 0.5  # the reference starts at the floor and takes 4 x this
    assert submission.function("outlast_the_reference")(seconds) == seconds
    running = [t for t in threading.enumerate() if t.name == "reference-limit" and t.is_alive()]
    assert running, "the reference's run had already ended: the case tests nothing"
    submission.close()
    for thread in running:
        thread.join(10)
    assert not any(t.is_alive() for t in running), "the reference's thread still runs 10 s after the close"
    assert thread_errors == [], f"the reference's thread raised: {thread_errors}"
    with pytest.raises(SubmissionError, match="the grading has ended"):
        submission._reference.get(1, False)  # what a run still under way would ask for next
