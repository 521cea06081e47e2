"""Per-test points lie on a 1/1024 grid and add up exactly (grader/points.py)."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from grader.points import GRID, dyadic_shares

# A stalled shared machine makes one draw take a second; that is no fault of the code under test.
LOADED_MACHINE = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
weights = st.lists(st.floats(min_value=0.0, max_value=1000.0, allow_nan=False), min_size=1, max_size=200)


@LOADED_MACHINE
@given(points=st.integers(min_value=0, max_value=1000), weights=weights)
def test_shares_sum_exactly_to_the_points_in_any_order(points, weights):
    shares = dyadic_shares(points, weights)
    assert len(shares) == len(weights) and all(s * GRID == int(s * GRID) >= 0 for s in shares)
    if sum(weights) > 0:
        shuffled = random.Random(0).sample(shares, len(shares))
        assert sum(shares) == sum(reversed(shares)) == sum(shuffled) == points
    else:
        assert shares == [0.0] * len(weights)


@LOADED_MACHINE
@given(points=st.integers(min_value=1, max_value=1000), weights=weights)
def test_each_share_is_its_quota_within_one_grid_step(points, weights):
    total = sum(weights)
    for share, weight in zip(dyadic_shares(points, weights), weights):
        quota = points * weight / total if total else 0.0
        assert abs(share - quota) < 1 / GRID + 1e-9


def test_equal_weights_get_equal_shares_up_to_one_step_the_first_ones_rounded_up():
    assert dyadic_shares(100, [1, 1, 1]) == [34134 / GRID, 34133 / GRID, 34133 / GRID]
    assert dyadic_shares(10, [1, 3]) == [2.5, 7.5]


def test_negative_weights_are_refused():
    with pytest.raises(ValueError, match="non-negative"):
        dyadic_shares(10, [1, -1])
