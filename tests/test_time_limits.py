"""A call's time limit follows the reference's time on the same call (grader/sandbox/limits.py):
an infinite loop costs seconds, and a correct call slower than the floor still finishes."""

from __future__ import annotations

import time

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
"""
REFERENCE = """
import time


def count_up(n):
    return n


def wait_a_little(seconds):
    time.sleep(seconds / 8)
    return seconds
"""
CEILING_S = 30.0


@pytest.fixture(scope="module")
def probe(tmp_path_factory) -> Submission:
    root = tmp_path_factory.mktemp("limits")
    for name, code in (("student", STUDENT), ("reference", REFERENCE)):
        (root / name).mkdir()
        (root / name / "probe.py").write_text(code)
    functions = {n: Function(n, "probe.py", "1. Probe") for n in ("count_up", "wait_a_little")}
    module = Module("probe", "Probe", "lectures/probe.md", 1, ("probe.py",), functions, CEILING_S, 1024)
    submission = Submission(module, root / "student", reference=root / "reference")
    yield submission
    submission.close()


def test_an_infinite_loop_is_stopped_at_a_multiple_of_the_reference_not_at_the_ceiling(probe):
    start = time.monotonic()
    with pytest.raises(SubmissionError) as raised:
        probe.function("count_up")(1)
    seconds = time.monotonic() - start
    assert raised.value.kind == "timeout", raised.value.message
    assert seconds < CEILING_S / 2, f"stopped after {seconds:.1f} s: the limit did not follow the reference"
    assert f"did not finish within {FLOOR_S:g} s ({FACTOR:g} x the reference's" in raised.value.message


def test_a_correct_call_longer_than_the_floor_gets_its_multiple_of_the_reference(probe):
    seconds = FLOOR_S + 1  # the reference takes an eighth: the limit is FACTOR / 8 times this
    assert probe.function("wait_a_little")(seconds) == seconds


def test_the_limit_is_the_ceiling_until_the_reference_is_measured_and_never_above_it():
    limit = ReferenceLimit(10.0, lambda: 1.0)
    assert limit.limit_s(0.0) == 10.0
    limit.limit_s(FLOOR_S)  # starts measuring
    limit.wait(5)
    assert limit.limit_s(FLOOR_S) == 10.0  # 20 x 1 s, capped by the ceiling
    quick = ReferenceLimit(10.0, lambda: 0.001)
    quick.limit_s(FLOOR_S)
    quick.wait(5)
    assert quick.limit_s(FLOOR_S) == FLOOR_S
    failed = ReferenceLimit(10.0, lambda: None)
    failed.limit_s(FLOOR_S)
    failed.wait(5)
    assert failed.limit_s(FLOOR_S) == 10.0
