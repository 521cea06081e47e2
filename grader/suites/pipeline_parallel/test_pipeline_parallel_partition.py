"""Hidden suite: partition is optimal (checked against every possible cut, brute force in
reference.py), contiguous and complete, on random costs drawn from the run's seed."""

from __future__ import annotations

import math
import random

import pytest

from grader.sandbox import Step
from grader.suites.pipeline_parallel.reference import best_bottleneck
from grader.testing import RUN_SEED, expect_exception


def random_cases(salt: str, count: int, integers: bool) -> list[tuple[list[float], int]]:
    rng = random.Random(f"{RUN_SEED}-{salt}")
    cases = []
    for _ in range(count):
        n = rng.randint(1, 11)
        costs = [rng.randint(0, 20) if integers else rng.lognormvariate(0, 1.5) for _ in range(n)]
        cases.append((costs, rng.randint(1, n)))
    return cases


def check(costs: list[float], p: int, stages, what: str) -> None:
    n = len(costs)
    assert isinstance(stages, list) and len(stages) == p, f"{what}: expected a list of {p} (start, end) pairs"
    starts = [s[0] for s in stages]
    ends = [s[1] for s in stages]
    assert starts[0] == 0 and ends[-1] == n and starts[1:] == ends[:-1], (
        f"{what}: stages {stages} are not contiguous from layer 0 to layer {n}"
    )
    assert all(a < b for a, b in stages), f"{what}: stages {stages} include an empty one"
    got = max(math.fsum(costs[a:b]) for a, b in stages)
    best = best_bottleneck(costs, p)
    assert math.isclose(got, best, rel_tol=1e-9, abs_tol=1e-12), (
        f"{what}: the largest stage costs {got:.6g}, but a cut with largest stage {best:.6g} exists: "
        f"search every cut (dynamic programming), a greedy fill is not optimal"
    )


@pytest.mark.points(5)
@pytest.mark.parametrize("integers", [True, False], ids=["integer-costs", "float-costs"])
def test_partition_minimises_the_largest_stage_on_random_costs(submission, integers):
    cases = random_cases("partition", 40, integers)
    results = submission.script([Step("partition", case) for case in cases]).steps[0]
    for (costs, p), stages in zip(cases, results):
        check(costs, p, stages, f"partition({costs}, {p})")


EDGE = [
    ([3.0], 1),  # one layer
    ([1, 2, 3, 4], 4),  # one layer per stage
    ([5, 1, 1, 1], 1),  # one stage
    ([0, 0, 0, 0, 0], 3),  # all free
    ([1, 1, 1, 1, 1, 1, 1, 10], 2),  # the heavy layer alone
    ([10, 1, 1, 1, 1, 1, 1, 1], 3),
    ([2, 2, 2, 5, 5, 2, 2, 2], 3),  # greedy to the average (8) cuts badly
    ([1, 4, 1, 4, 1, 4, 1], 4),
]


@pytest.mark.points(3)
def test_partition_handles_single_layers_single_stages_and_zero_costs(submission):
    results = submission.script([Step("partition", case) for case in EDGE]).steps[0]
    for (costs, p), stages in zip(EDGE, results):
        check(costs, p, stages, f"partition({costs}, {p})")


BAD = [
    ([1, 2, 3], 0),
    ([1, 2, 3], 4),
    ([], 1),
    ([1, -2, 3], 2),
    ([1, -0.5, 3], 2),
    ([1, math.nan, 3], 2),
    ([1, math.inf], 1),
]


@pytest.mark.points(2)
@pytest.mark.parametrize(
    ("costs", "p"), BAD, ids=["p=0", "p>n", "no-layers", "negative", "negative-fraction", "nan", "inf"]
)
def test_partition_refuses_bad_input_with_value_error(submission, costs, p):
    expect_exception("ValueError", lambda: submission.function("partition")(costs, p))
