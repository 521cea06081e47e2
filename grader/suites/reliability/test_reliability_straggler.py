"""Hidden suite: straggler on step and wait tables whose answer the docstring fixes: a rank that
computes longest though every step time is the same, one that waits least but is not the
slowest, one slow step that is not a straggler, the threshold on either side, ties, one rank,
and the refusals."""

from __future__ import annotations

import pytest
import torch

from grader.testing import expect_exception, generator


def table(compute: list[list[float]], step: float | list[list[float]] | None = None) -> tuple[list, list]:
    """(step_times, wait_times) of a synchronous job: every rank's step lasts as long as the
    slowest rank's compute (or `step`), and the rest of it is waiting."""
    ranks, steps = len(compute), len(compute[0])
    if step is None:
        step = [[max(compute[r][s] for r in range(ranks)) + 0.01] * ranks for s in range(steps)]
        step = [[step[s][r] for s in range(steps)] for r in range(ranks)]
    elif isinstance(step, float):
        step = [[step] * steps for _ in range(ranks)]
    waits = [[step[r][s] - compute[r][s] for s in range(steps)] for r in range(ranks)]
    return step, waits


def noisy(ranks: int, steps: int, slow: int | None, factor: float, *salt: object) -> list[list[float]]:
    gen = generator("straggler", *salt)
    base = 0.1 + 0.02 * torch.rand(ranks, steps, generator=gen, dtype=torch.float64)  # within 20%
    compute = base.tolist()
    if slow is not None:
        compute[slow] = [c * factor for c in compute[slow]]
    return compute


@pytest.mark.points(2)
@pytest.mark.parametrize(("ranks", "slow"), [(8, 5), (4, 0), (16, 15), (2, 1)])
def test_the_rank_that_computes_longest_is_named_though_every_step_lasts_the_same(submission, ranks, slow):
    steps, waits = table(noisy(ranks, 10, slow, 1.6, ranks, slow))
    got = submission.function("straggler")(steps, waits)
    assert got == slow, (
        f"{ranks} ranks whose steps all last the same, rank {slow} computing 1.6x longer (it waits least): expected "
        f"{slow}, got {got!r}. Step times alone cannot tell; compute = step - wait does"
    )


def test_a_healthy_job_has_no_straggler(submission):
    steps, waits = table(noisy(8, 10, None, 1.0, "healthy"))
    got = submission.function("straggler")(steps, waits)
    assert got is None, f"8 ranks within 20% of each other: expected None, got {got!r}"


@pytest.mark.points(3)
def test_the_straggler_is_the_longest_compute_not_the_least_wait(submission):
    """Rank 0 waits least (2 s) but computes 8 s; rank 1 waits 3 s and computes 9 s."""
    steps = [[10.0] * 5, [12.0] * 5, [10.0] * 5]
    waits = [[2.0] * 5, [3.0] * 5, [6.0] * 5]
    got = submission.function("straggler")(steps, waits)
    assert got == 1, f"compute times 8, 9, 4 s: expected rank 1 (9 > 1.2 x median(8, 4) = 7.2), got {got!r}"


@pytest.mark.points(3)
def test_one_slow_step_is_not_a_straggler_the_median_is_taken(submission):
    compute = [[1.0] * 9 for _ in range(4)]
    compute[2][4] = 30.0  # a garbage collection, once
    compute[3] = [1.5] * 4 + [0.1] * 5  # slow in 4 steps of 9 only
    got = submission.function("straggler")(*table(compute))
    assert got is None, (
        f"rank 2 slow in one step and rank 3 in 4 of 9: their medians are typical; expected None, got {got!r}"
    )


@pytest.mark.points(3)
def test_the_threshold_is_a_strict_bound_on_the_median_of_the_other_ranks(submission):
    """Rank 1's typical compute is exactly 1.25x, then just above it, the others' median."""
    at, above = [[2.0] * 3, [2.5] * 3, [2.0] * 3], [[2.0] * 3, [2.5001] * 3, [2.0] * 3]
    call = submission.function("straggler")
    assert call(*table(at, 5.0), threshold=1.25) is None, "exactly threshold x the others' median: not a straggler"
    assert call(*table(above, 5.0), threshold=1.25) == 1, "just above threshold x the others' median: rank 1"
    assert call(*table(above, 5.0)) == 1, "the default threshold is 1.2"
    assert call(*table([[2.0] * 3, [2.39] * 3, [2.0] * 3], 5.0)) is None, "2.39 < 1.2 x 2: none by default"


def test_ties_go_to_the_lowest_rank_and_one_rank_has_no_straggler(submission):
    call = submission.function("straggler")
    assert call(*table([[1.0] * 3, [3.0] * 3, [3.0] * 3, [1.0] * 3, [1.0] * 3], 4.0)) == 1
    assert call(*table([[5.0, 6.0]], 7.0)) is None, "a single rank is nobody's straggler"


def test_a_rank_that_waits_its_whole_step_is_allowed(submission):
    """A wait equal to its step (a rank that computed nothing) is not "longer than its step"."""
    steps, waits = [[1.0, 1.0], [1.0, 1.0]], [[1.0, 0.5], [0.0, 0.5]]
    got = submission.function("straggler")(steps, waits)
    assert got == 1, (
        f"rank 0 computes 0 and 0.5 s, rank 1 1 and 0.5 s (medians 0.25 and 0.75 > 1.2 x 0.25): expected 1, got {got!r}"
    )


def test_the_median_of_an_even_count_is_the_mean_of_the_two_middle_values(submission):
    """statistics.median, not torch.median's lower middle value: over 2 steps, and over 4 other ranks."""
    call = submission.function("straggler")
    # ranks 0 and 1 compute 1 and 3 s (median 2, lower 1), rank 2 2.2 s twice: 2.2 <= 1.2 x 2 = 2.4
    got = call(*table([[1.0, 3.0], [1.0, 3.0], [2.2, 2.2]], 4.0))
    assert got is None, (
        f"medians over 2 steps 2, 2, 2.2 (the mean of the two middle values): 2.2 <= 1.2 x 2, expected None, got "
        f"{got!r} (with the lower middle values, 1, 1, 2.2, rank 2 would be named)"
    )
    # rank 4 computes 1.3 s; the others' median is (1.0 + 1.25) / 2 = 1.125, and 1.3 <= 1.2 x 1.125 = 1.35
    got = call(*table([[0.5], [1.0], [1.25], [1.28], [1.3]], 2.0))
    assert got is None, (
        f"typical compute 0.5, 1.0, 1.25, 1.28, 1.3: the other ranks' median is (1.0 + 1.25) / 2 = 1.125 and "
        f"1.3 <= 1.2 x 1.125, expected None, got {got!r} (with the lower middle value, 1.0, rank 4 would be named)"
    )


BAD = [
    (([], []), "no rank"),
    (([[]], [[]]), "no step"),
    (([[1.0, 1.0], [1.0, 1.0]], [[0.5, 0.5]]), "a wait table with fewer ranks"),
    (([[1.0, 1.0], [1.0]], [[0.5, 0.5], [0.5]]), "ranks with different step counts"),
    (([[1.0, 1.0], [1.0, 1.0]], [[0.5, 0.5], [0.5, 1.5]]), "a wait longer than its step"),
    (([[1.0, -1.0], [1.0, 1.0]], [[0.5, 0.0], [0.5, 0.5]]), "a negative step time"),
    (([[1.0, 1.0], [1.0, 1.0]], [[0.5, -0.1], [0.5, 0.5]]), "a negative wait"),
]


@pytest.mark.points(0.25)
@pytest.mark.parametrize(("args", "why"), BAD, ids=[why for _, why in BAD])
def test_bad_step_tables_raise_value_error(submission, args, why):
    expect_exception("ValueError", lambda: submission.function("straggler")(*args))


def test_a_threshold_below_one_raises_value_error(submission):
    expect_exception("ValueError", lambda: submission.function("straggler")([[1.0]], [[0.0]], threshold=0.9))
