"""Hidden suite, performance (counted): FlashAttention never materialises the score matrix, and a
causal call skips the tiles above the diagonal.

The "largest" probe (grader/sandbox/probes.py, a TorchDispatchMode recording the size of every
tensor an operator produces) runs around forward AND backward of flash_attention_torch. The
bound is the larger of the inputs themselves (q has B*H*Nq*d elements: the output and dq are as
large) and one tile of scores per (batch, head), B*H*block_q*block_k. With seq >> head_dim this is
far below the B*H*Nq*Nk of the score matrix, and below a row of tiles (B*H*block_q*Nk) too.
"""

from __future__ import annotations

import pytest

from grader.sandbox import Step
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


def visible_fraction(seq_q: int, seq_k: int, block_q: int, block_k: int) -> float:
    """The share of the seq_q x seq_k scores that lie in tiles holding at least one visible score:
    a tile of rows [r0, r1) and keys [c0, c1) has one unless c0 > (r1 - 1) + (seq_k - seq_q)."""
    offset, area = seq_k - seq_q, 0
    for r0 in range(0, seq_q, block_q):
        r1 = min(r0 + block_q, seq_q)
        for c0 in range(0, seq_k, block_k):
            if c0 <= r1 - 1 + offset:
                area += (r1 - r0) * (min(c0 + block_k, seq_k) - c0)
    return area / (seq_q * seq_k)


def _matmul_flops(submission, case: Case, block_q: int, block_k: int, causal: bool) -> tuple[int, int]:
    """Matmul FLOPs (FlopCounterMode in the worker) of flash_attention_torch's forward, then of
    the backward of its out."""
    q, k, v, grad_out = case.inputs("skip", block_q, block_k)
    steps = [
        Step(
            "flash_attention_torch",
            tuple(t.requires_grad_() for t in (q, k, v)),
            {"causal": causal, "block_q": block_q, "block_k": block_k},
            save_as="result",
            send_back=False,
            measure=("flops",),
        ),
        Step("result.__getitem__", (0,), save_as="out", send_back=False),
        Step("out.backward", (grad_out,), send_back=False, measure=("flops",)),
    ]
    figures = submission.script(steps).measurements[0]
    return figures[0]["flops"], figures[2]["flops"]


SKIP_CASES = [  # (case, block_q, block_k)
    # 3 x 3 tiles, 6 with a visible score: each query block's last row sees exactly up to the end of
    # its diagonal tile, so visiting the next one (a skip test off by one) is 8 of 9.
    (Case(1, 4, 2, 96, 96, 16, True), 32, 32),
    # Nq != Nk and blocks of different sizes, neither dividing the lengths: 79% of the scores are in
    # visible tiles, 96% with block_q and block_k swapped.
    (Case(1, 2, 1, 43, 51, 16, True), 12, 32),
]
SKIP_SLACK = 0.05  # of the non-causal FLOPs: a D = rowsum(dO * O) done by matmul is far below it


@pytest.mark.perf
@pytest.mark.points(2)
@pytest.mark.parametrize(
    ("case", "block_q", "block_k"), SKIP_CASES, ids=lambda c: c.id if isinstance(c, Case) else str(c)
)
def test_flash_attention_torch_skips_the_tiles_above_the_diagonal(submission, case, block_q, block_k, record_property):
    """Docstring: "With causal=True, every block_q x block_k tile entirely above the diagonal is
    skipped, forward and backward". Every matmul of a tiled pass is per tile and proportional to its
    area, so the causal call's FLOPs, over the same call's without causal, may not exceed the share
    of the scores in tiles with a visible score (plus SKIP_SLACK): forward and backward apart."""
    causal = _matmul_flops(submission, case, block_q, block_k, causal=True)
    full = _matmul_flops(submission, case, block_q, block_k, causal=False)
    share = visible_fraction(case.seq_q, case.seq_k, block_q, block_k)
    for name, mine, everything in zip(("forward", "backward"), causal, full):
        record_property(f"{name}_flops_causal_over_full", round(mine / max(everything, 1), 3))
        assert mine <= (share + SKIP_SLACK) * everything, (
            f"flash_attention_torch {name}, causal, Nq={case.seq_q}, Nk={case.seq_k}, blocks "
            f"{block_q}x{block_k} ({case.heads} query heads over {case.kv_heads}): {mine:,} matmul FLOPs, "
            f"{mine / everything:.0%} of the {everything:,} of the same call with causal=False; the tiles "
            f"holding a visible score cover {share:.0%} of the scores (at most {share + SKIP_SLACK:.0%} "
            f"allowed). Skip every tile whose first key is past its last query row's diagonal "
            f"(key > row + Nk - Nq) in the {name}, with the tiles block_q queries high and block_k keys wide."
        )
