"""Broken submissions get a clear message and the right partial score, and grading of everything
else completes. Each case is the reference plus one variant file (tests/variants/<module>/)."""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pytest
from conftest import build_variant, grade_json

TIME_LIMIT = "2"  # seconds per call: keeps the hanging cases short


@dataclass(frozen=True)
class Case:
    variant: str
    failing: str  # regex: exactly the tests whose names match must fail
    kind: str  # how the grader classifies the failure ("" for a wrong answer)
    message: str  # regex the first failure's message must match
    # Every correctness test but the two largest inputs (which only make the run longer).
    select: str = "not perf and not large-float32 and not not-divisible-int64"


CASES = [
    Case(
        "deadlock_receive_first",
        r"test_ring_",
        "timeout",
        r"did not finish within 2 s; where each rank was:\n  rank 0: ring\.py:\d+ in _send_right_receive_left\(\): "
        r"dist\.recv\(receive, left, group\)",
    ),
    Case(
        "hang_at_world_size_3",
        r"test_ring_(allreduce|allgather)\w*\[world=3|sums_in_place\[3\]|not_divisible_by_the_world|uneven_shards",
        "timeout",
        r"rank \d: ring\.py:\d+ in \w+\(\)",
    ),
    Case("sys_exit", r"test_ring_allreduce", "exit", r"every rank: called sys\.exit\(0\)"),
    Case("os_exit", r"test_ring_allgather|uneven_shards", "crash", r"rank 1: the process exited with code 0"),
    Case(
        "exception",
        r"test_ring_reduce_scatter",
        "exception",
        r"every rank: \n\s+File \"collectives/ring\.py\", line \d+, in ring_reduce_scatter\n(.*\n)+"
        r"\s+IndexError: tuple index out of range",
    ),
    Case(
        "segfault",
        r"test_ring_allreduce",
        "crash",
        r"killed by SIGSEGV[^\n]*\n\s+crashed at ring\.py:\d+ in ring_allreduce\(\): ctypes\.string_at\(0\)",
    ),
    Case(
        "infinite_loop",
        r"allreduce_time",
        "timeout",
        r"allreduce_time did not finish within 2 s; it was at:\n  cost_model\.py:\d+ in allreduce_time\(\)",
    ),
    Case(
        "wrong_shape",
        r"test_ring_reduce_scatter(?!.*empty)",
        "",
        r"rank \d: .*shape \(\d+,\), expected \(\d+,\)",
    ),
    Case(
        "forbidden_collective",
        r"test_ring_allreduce",
        "forbidden",
        r"ring_allreduce may not call torch\.distributed\.all_reduce",
    ),
]


@pytest.fixture(scope="module")
def graded(tmp_path_factory) -> dict[str, dict]:
    """Every case graded once, three at a time: most of their time is spent waiting for
    hung calls to reach their limit, so they overlap well even on two cores."""

    def grade(case: Case) -> dict:
        root = tmp_path_factory.mktemp(case.variant)
        submission = build_variant("collectives", case.variant, root / "submission")
        arguments = ("collectives", "--select", case.select, "--time-limit", TIME_LIMIT)
        return grade_json(submission, *arguments, out=root / "results.json")

    with ThreadPoolExecutor(max_workers=3) as pool:
        return dict(zip([c.variant for c in CASES], pool.map(grade, CASES)))


@pytest.mark.parametrize("case", CASES, ids=[c.variant for c in CASES])
def test_broken_submission_fails_only_what_it_breaks(case, graded):
    results = graded[case.variant]
    tests = {t["name"].split(": ", 1)[1]: t for t in results["tests"]}
    should_fail = {name for name in tests if re.search(case.failing, name)}
    failed = {name for name, t in tests.items() if t["status"] != "passed"}
    assert should_fail, f"no test matches {case.failing!r}"
    wrongly_failed, wrongly_passed = sorted(failed - should_fail), sorted(should_fail - failed)
    assert not wrongly_failed and not wrongly_passed, (
        f"failed but should pass: {wrongly_failed}\npassed but should fail: {wrongly_passed}\n"
        + "\n".join(f"{n}: {tests[n]['output'][:400]}" for n in wrongly_failed[:3])
    )
    first = _first_real(tests, should_fail)
    assert first["extra_data"]["kind"] == case.kind, first["output"]
    assert re.search(case.message, first["output"]), f"message does not match {case.message!r}:\n{first['output']}"
    # The right partial score: exactly the points of the tests that still pass.
    expected = sum(t["max_score"] for t in tests.values() if t["status"] == "passed")
    assert results["score"] == pytest.approx(expected, abs=0.01)  # per-test scores are rounded
    assert 0 < results["score"] < 100


def _first_real(tests: dict, names: set[str]) -> dict:
    """The failure that carries the diagnosis (later ones may just say it already hung/crashed)."""
    return next(tests[n] for n in sorted(names) if not tests[n]["output"].startswith("not run:"))
