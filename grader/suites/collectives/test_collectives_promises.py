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
