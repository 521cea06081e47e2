"""Hidden suite, performance (counted): FlashAttention never materialises the score matrix.

The "largest" probe (grader/sandbox/probes.py, a TorchDispatchMode recording the size of every
tensor an operator produces) runs around forward AND backward of flash_attention_torch. The
bound is the larger of the inputs themselves (q has B*H*Nq*d elements: the output and dq are as
large) and one tile of scores per (batch, head), B*H*block_q*block_k. With seq >> head_dim this is
far below the B*H*Nq*Nk of the score matrix, and below a row of tiles (B*H*block_q*Nk) too.
"""

from __future__ import annotations

import pytest

from grader.suites.attention.attention_reference import Case, check_against_reference, forward_backward

BLOCK = 64  # the default block_q and block_k of flash_attention_torch
MEMORY_CASES = [
    Case(1, 2, 2, 1024, 1024, 16, False),
    Case(1, 4, 1, 512, 512, 16, True),
]


def largest_allowed(case: Case) -> int:
    inputs = case.batch * case.heads * max(case.seq_q, case.seq_k) * case.head_dim
    return max(inputs, case.batch * case.heads * BLOCK * BLOCK)


@pytest.mark.perf
@pytest.mark.points(8)
@pytest.mark.parametrize("case", MEMORY_CASES, ids=lambda c: c.id)
def test_flash_attention_torch_never_materialises_the_score_matrix(submission, case, record_property):
    """Largest tensor produced during forward + backward <= max(inputs, one tile per head)."""
    mine, expected, figures = forward_backward(
        submission, "flash_attention_torch", case, "memory", measure=("largest",)
    )
    check_against_reference(mine, expected, case.dtype, f"flash_attention_torch on {case.described}")
    allowed = largest_allowed(case)
    scores = case.batch * case.heads * case.seq_q * case.seq_k
    record_property("largest_elements", figures["largest"])
    record_property("largest_op", figures["largest_op"])
    record_property("allowed_elements", allowed)
    record_property("score_matrix_elements", scores)
    assert figures["largest"] <= allowed, (
        f"flash_attention_torch (forward + backward) created a tensor of {figures['largest']:,} elements "
        f"({figures['largest_op']}); the limit is {allowed:,} (the inputs, or one {BLOCK}x{BLOCK} tile of "
        f"scores per head), the full score matrix has {scores:,}. Work on one tile of scores at a time, "
        f"in the forward and in the backward (recompute P from lse)."
    )
