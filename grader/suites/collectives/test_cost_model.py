"""Hidden suite: allreduce_time against values computed by hand from the alpha-beta model
(Thakur, Rabenseifner & Gropp 2005), powers of two and not, and its input validation."""

from __future__ import annotations

import pytest

from grader.testing import expect_exception

A, B, N = 5e-6, 1e-10, 64 * 2**20  # 5 us latency, 10 GB/s, 64 MiB
HAND_COMPUTED = [
    # ring: 2(p-1) a + 2(p-1)/p n b
    ("ring", 2, 2 * A + N * B),
    ("ring", 4, 6 * A + 1.5 * N * B),
    ("ring", 6, 10 * A + (10 / 6) * N * B),
    # recursive doubling: log2(p) (a + n b), plus 2 (a + n b) folding when p is not a power of 2
    ("recursive_doubling", 8, 3 * (A + N * B)),
    ("recursive_doubling", 6, 2 * (A + N * B) + 2 * (A + N * B)),
    ("recursive_doubling", 5, 2 * (A + N * B) + 2 * (A + N * B)),
    # Rabenseifner: 2 log2(p) a + 2(p-1)/p n b, on p' = 4 plus folding for p = 6
    ("rabenseifner", 8, 6 * A + 1.75 * N * B),
    ("rabenseifner", 6, 4 * A + 1.5 * N * B + 2 * (A + N * B)),
    ("rabenseifner", 1024, 20 * A + 2 * 1023 / 1024 * N * B),
    ("ring", 1, 0.0),
    ("rabenseifner", 1, 0.0),
]


@pytest.mark.parametrize(
    ("algorithm", "world_size", "expected"), HAND_COMPUTED, ids=[f"{a}-p{p}" for a, p, _ in HAND_COMPUTED]
)
def test_allreduce_time_matches_hand_computed(submission, algorithm, world_size, expected):
    got = submission.function("allreduce_time")(algorithm, world_size, N, A, B)
    assert got == pytest.approx(expected, rel=1e-9, abs=1e-15), (
        f"allreduce_time({algorithm!r}, {world_size}, {N}, {A}, {B}) returned {got}, expected {expected}"
    )


def test_allreduce_time_crossover_latency_vs_bandwidth(submission):
    """Small messages favour the log-latency algorithms, large ones ring/Rabenseifner."""
    time = submission.function("allreduce_time")
    small, large = 1024, 1 << 30
    assert time("recursive_doubling", 64, small, A, B) < time("ring", 64, small, A, B), (
        "for 1 KiB on 64 ranks recursive doubling (6 steps) must beat ring (126 steps)"
    )
    assert time("ring", 64, large, A, B) < time("recursive_doubling", 64, large, A, B), (
        "for 1 GiB on 64 ranks ring (2(p-1)/p n bytes) must beat recursive doubling (log2(p) n bytes)"
    )


@pytest.mark.parametrize(
    "arguments",
    [("tree", 4, N, A, B), ("ring", 0, N, A, B), ("ring", 4, -1, A, B), ("ring", 4, N, -A, B)],
    ids=["unknown-algorithm", "world-size-0", "negative-bytes", "negative-alpha"],
)
def test_allreduce_time_rejects_bad_input_with_value_error(submission, arguments):
    expect_exception("ValueError", lambda: submission.function("allreduce_time")(*arguments))
