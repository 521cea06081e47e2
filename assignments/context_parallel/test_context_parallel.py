"""Public tests for the context_parallel module: run them while you work with

    pytest assignments/context_parallel            (add -s to see what each rank prints)

Your functions run in worker processes, one per rank, joined by torch.distributed (gloo), on
worlds of 2 and 4. One test runs ring attention in two process groups of 2 side by side in a
world of 4 (Group((0, 2)) and Group((1, 3))): communicate within `group`, take your place in the
sequence from dist.get_rank(group), and send to dist.get_global_rank(group, i). The hidden suite
checks more (causal and not, GQA, every variant on 2 and 4 ranks and in process groups) and
counts bytes, the largest tensor, FLOPs per rank and the order of your sends and matmuls;
`make grade` gives the score.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from grader.sandbox import Group, Step
from grader.testing import assert_matches, expect_exception, generator


def whole_sequence(h_q=4, h_kv=2, s=8, d=4, salt="public"):
    gen = generator("cp-public", h_q, h_kv, s, d, salt)
    q = torch.randn(1, h_q, s, d, generator=gen, dtype=torch.float64)
    k = torch.randn(1, h_kv, s, d, generator=gen, dtype=torch.float64)
    v = torch.randn(1, h_kv, s, d, generator=gen, dtype=torch.float64)
    grad = torch.randn(1, h_q, s, d, generator=gen, dtype=torch.float64)
    return q, k, v, grad


def sdpa(q, k, v, grad, causal):
    q, k, v = (x.clone().requires_grad_(True) for x in (q, k, v))
    out = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
    out.backward(grad)
    return {"output": out.detach(), "grad_q": q.grad, "grad_k": k.grad, "grad_v": v.grad}


@pytest.mark.parametrize("causal", [False, True])
def test_ring_attention_on_2_ranks_matches_sdpa(submission, causal):
    q, k, v, grad = whole_sequence()
    args = [(*(x.chunk(2, dim=2)[r].contiguous() for x in (q, k, v, grad)), causal) for r in range(2)]
    result = submission.function("ring_step").spmd(2, args)
    want = sdpa(q, k, v, grad, causal)
    for rank in range(2):
        for key, expected in want.items():
            assert_matches(
                result.outputs[rank][key], expected.chunk(2, dim=2)[rank], f"rank {rank}: {key}", 1e-10, 1e-10
            )


def test_zigzag_shard_gives_rank_i_chunks_i_and_2p_minus_1_minus_i(submission):
    x = torch.arange(8.0).view(1, 1, 8, 1)
    result = submission.function("zigzag_shard").spmd(2, [(x,)] * 2)
    assert result.outputs[0].flatten().tolist() == [0.0, 1.0, 6.0, 7.0]
    assert result.outputs[1].flatten().tolist() == [2.0, 3.0, 4.0, 5.0]


def zigzag(x: torch.Tensor, p: int, rank: int) -> torch.Tensor:
    """Rank `rank`'s zigzag shard of a whole sequence (dimension 2): chunks rank and 2p-1-rank of 2p."""
    chunks = x.chunk(2 * p, dim=2)
    return torch.cat([chunks[rank], chunks[2 * p - 1 - rank]], dim=2)


def test_zigzag_layout_on_4_ranks_shards_attends_and_unshards(submission):
    """On 4 ranks (a rank's left and right neighbours differ, unlike on 2): zigzag_shard of the
    whole sequence, zigzag_unshard of each rank's shard of the attention output back to the whole
    output, and causal ring attention in the zigzag layout against SDPA, forward and backward."""
    p = 4
    q, k, v, grad = whole_sequence(s=16, salt="zigzag-4")  # 2p = 8 chunks of 2 positions
    want = sdpa(q, k, v, grad, causal=True)
    steps = [
        [
            Step("zigzag_shard", (q,)),
            Step("zigzag_unshard", (zigzag(want["output"], p, r),)),
            Step("ring_step", (*(zigzag(x, p, r) for x in (q, k, v, grad)), True), {"layout": "zigzag"}),
        ]
        for r in range(p)
    ]
    ranks = submission.script_spmd(p, steps).steps
    for r in range(p):
        shard, whole, ring = ranks[r]
        assert_matches(shard, zigzag(q, p, r), f"zigzag_shard on 4 ranks, rank {r}: chunks {r} and {7 - r} of 8")
        assert_matches(whole, want["output"], f"zigzag_unshard on 4 ranks, rank {r}: the whole sequence in order")
        for key, expected in want.items():
            what = f"ring_attention(causal=True, layout='zigzag') on 4 ranks, rank {r}: {key}"
            assert_matches(ring[key], zigzag(expected, p, r), what, 1e-10, 1e-10)


def test_ring_attention_in_two_groups_of_2_ranks_of_a_world_of_4(submission):
    """Ranks {0, 2} and {1, 3} each run causal ring attention on their own sequence at the same
    time; global rank 3 is rank 1 of Group((1, 3)), and its ring neighbour is global rank 1."""
    groups = ((0, 2), (1, 3))
    data = {group: whole_sequence(salt=("group", group)) for group in groups}
    args: list[tuple] = [()] * 4
    for group in groups:
        for g, rank in enumerate(group):
            args[rank] = (*(x.chunk(2, dim=2)[g].contiguous() for x in data[group]), True, Group(group))
    result = submission.function("ring_step").spmd(4, args)
    for group in groups:
        want = sdpa(*data[group], causal=True)
        for g, rank in enumerate(group):
            for key, expected in want.items():
                what = (
                    f"ring attention in Group({group}), global rank {rank} (group rank {g}): {key} (communicate "
                    f"within `group`, p2p to dist.get_global_rank(group, i), positions from dist.get_rank(group))"
                )
                assert_matches(result.outputs[rank][key], expected.chunk(2, dim=2)[g], what, 1e-10, 1e-10)


@pytest.mark.parametrize("variant", ["ulysses", "allgather_kv"])
def test_ulysses_and_allgather_kv_on_2_ranks_match_sdpa(submission, variant):
    q, k, v, grad = whole_sequence(salt=variant)
    args = [(variant, *(x.chunk(2, dim=2)[r].contiguous() for x in (q, k, v, grad)), True) for r in range(2)]
    result = submission.function("cp_step").spmd(2, args)
    want = sdpa(q, k, v, grad, True)
    for rank in range(2):
        for key, expected in want.items():
            assert_matches(
                result.outputs[rank][key],
                expected.chunk(2, dim=2)[rank],
                f"{variant}, rank {rank}: {key}",
                1e-10,
                1e-10,
            )


def test_ulysses_refuses_heads_that_do_not_split(submission):
    q = torch.zeros(1, 3, 4, 4, dtype=torch.float64)
    expect_exception("ValueError", lambda: submission.function("cp_step").spmd(2, [("ulysses", q, q, q)] * 2))


def test_cp_comm_bytes_of_the_ring(submission):
    # s=32, b=1, 4 query and 2 kv heads, d=8, p=4, 2-byte elements: one K block is 2*8*8*2 = 256 bytes
    assert tuple(submission.function("cp_comm_bytes")("ring", 32, 1, 4, 2, 8, 4, 2)) == (1536, 3072)


def test_ring_overlap_condition_without_latency(submission):
    # alpha = 0: s_local = h_kv * bytes * flops * beta / (2 h_q)
    got = submission.function("ring_overlap_condition")(1, 32, 8, 128, 2, 1e15, 0.0, 1e-11)
    assert got == pytest.approx(8 * 2 * 1e15 * 1e-11 / (2 * 32))
