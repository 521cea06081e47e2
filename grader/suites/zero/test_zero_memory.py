"""Hidden suite: zero_memory_per_rank against the ZeRO paper (Rajbhandari et al., 2020, figure 1
and section 5): 2 + 2 + K bytes per parameter, the last parts divided by the world size."""

from __future__ import annotations

import math

import pytest

from grader.testing import expect_exception


@pytest.mark.points(6)
def test_zero_memory_reproduces_the_papers_worked_example(submission):
    """7.5B parameters, 64 GPUs, mixed-precision Adam (K = 12): 120, 31.4, 16.6, 1.88 GB."""
    memory = submission.function("zero_memory_per_rank")
    expected = [120e9, 31.40625e9, 16.640625e9, 1.875e9]
    for stage, want in enumerate(expected):
        got = memory(7_500_000_000, 64, stage)
        assert math.isclose(got, want, rel_tol=1e-9), (
            f"stage {stage}: got {got:.4g} bytes, the paper gives {want:.4g} (psi = 7.5e9, N_d = 64, K = 12)"
        )


@pytest.mark.points(3)
def test_zero_memory_uses_the_given_byte_counts(submission):
    """fp32 training with plain SGD: 4 + 4 + 0 bytes per parameter; Adam in fp32: K = 8."""
    memory = submission.function("zero_memory_per_rank")
    cases = [
        ((1000, 4, 2, 4, 4, 0), 1000 * (4 + 4 / 4)),
        ((1000, 4, 1, 4, 4, 8), 1000 * (4 + 4 + 8 / 4)),
        ((1000, 8, 3, 2, 2, 12), 1000 * 16 / 8),
        ((1000, 1, 2), 16000),
    ]
    for args, want in cases:
        got = memory(*args)
        assert math.isclose(got, want, rel_tol=1e-9), f"zero_memory_per_rank{args}: got {got}, expected {want}"


@pytest.mark.points(1)
def test_zero_memory_rejects_an_unknown_stage(submission):
    expect_exception("ValueError", lambda: submission.function("zero_memory_per_rank")(1000, 4, 4))
