"""Hidden suite: the promises of the collectives docstrings that the other files leave untested
(tests/spec/promises.toml maps every promise to its tests). allreduce_time's input validation,
one bad argument per call, against the docstring's list of errors."""

from __future__ import annotations

import pytest

from grader.testing import expect_exception

A, B, N = 5e-6, 1e-10, 64 * 2**20

NEGATIVE = [
    ("nbytes", ("ring", 4, -1.0, A, B)),
    ("alpha", ("recursive_doubling", 4, N, -A, B)),
    ("beta", ("rabenseifner", 4, N, A, -B)),
]


@pytest.mark.points(1)
@pytest.mark.parametrize(("argument", "arguments"), NEGATIVE, ids=[f"negative-{name}" for name, _ in NEGATIVE])
def test_allreduce_time_rejects_each_negative_size_or_cost(submission, argument, arguments):
    """Docstring: "Raises ValueError for ... negative nbytes, alpha, beta"; each is checked alone."""
    try:
        expect_exception("ValueError", lambda: submission.function("allreduce_time")(*arguments))
    except AssertionError as error:
        raise AssertionError(f"allreduce_time{arguments} (a negative {argument}): {error}") from None


@pytest.mark.points(1)
def test_allreduce_time_rejects_a_negative_world_size(submission):
    """world_size < 1 includes negative sizes, not only 0."""
    arguments = ("ring", -2, N, A, B)
    try:
        expect_exception("ValueError", lambda: submission.function("allreduce_time")(*arguments))
    except AssertionError as error:
        raise AssertionError(f"allreduce_time{arguments}: {error}") from None


ZERO_COSTS = [
    ("nbytes", ("ring", 4, 0.0, A, B), 2 * 3 * A),
    ("alpha", ("recursive_doubling", 4, N, 0.0, B), 2 * N * B),
    ("beta", ("rabenseifner", 4, N, A, 0.0), 2 * 2 * A),
]


@pytest.mark.points(1)
@pytest.mark.parametrize(("argument", "arguments", "expected"), ZERO_COSTS, ids=[f"zero-{n}" for n, *_ in ZERO_COSTS])
def test_allreduce_time_accepts_a_zero_size_or_cost(submission, argument, arguments, expected):
    """Only negative values are errors: a zero nbytes, alpha or beta is a valid (free) term, and
    the formula of the docstring, computed here by hand, gives the time."""
    got = submission.function("allreduce_time")(*arguments)
    assert got == pytest.approx(expected, rel=1e-12), (
        f"allreduce_time{arguments} (a zero {argument}) returned {got!r}, expected {expected!r}: only negative "
        f"values raise ValueError"
    )


@pytest.mark.points(1)
def test_allreduce_time_of_one_rank_is_zero_whatever_the_size(submission):
    """"A world of one rank costs 0 seconds", even for an infinite message (the formula would
    give 0 * inf = nan)."""
    for algorithm in ("ring", "recursive_doubling", "rabenseifner"):
        got = submission.function("allreduce_time")(algorithm, 1, float("inf"), A, B)
        assert got == 0.0, f"allreduce_time({algorithm!r}, 1, inf, {A}, {B}) returned {got!r}: one rank sends nothing"
