"""Hidden suite: every variant equals one process. On gloo worlds of 2 and 4 ranks (one call per
world: reference.run_cases), ring attention (contiguous and zigzag), Ulysses and all-gathered K/V,
causal and not, MHA and GQA, float64, forward and backward: the output and the gradients of q, k
and v of each rank's shard against F.scaled_dot_product_attention on the whole sequence
(enable_gqa) cut the same way; every variant again on a world of one rank, where it is plain
attention. zigzag_shard and zigzag_unshard by their definitions. Ring attention (both layouts,
causal, 4 ranks, forward) on logits around 1e3 in float64, and in bfloat16 and float16 (the
output keeps q's dtype) against SDPA in float64 on the same values."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from grader.sandbox import Step
from grader.suites.context_parallel.reference import CASES, case_outputs, cut, run_cases, sdpa_reference, zigzag
from grader.testing import assert_matches, generator

TOL = (1e-10, 1e-10)
FUNCTION = {
    "ring": "ring_attention",
    "zigzag": "ring_attention(layout='zigzag')",
    "ulysses": "ulysses_attention",
    "allgather_kv": "allgather_kv_attention",
}
# (dtype, scale of q): logits q k^T / sqrt(d) of about 1e3 in float64 (e^lse overflows past 709),
# O(1) in the low precisions, where the reference's worst error is about 6 eps.
EXTREMES = ((torch.float64, 1e3), (torch.bfloat16, 1.0), (torch.float16, 1.0))


def check_variant(submission, p: int, variant: str) -> None:
    run = run_cases(submission, p)
    for case in (c for c in CASES if c.variant == variant):
        got, _ = case_outputs(run, case)
        want = sdpa_reference(run["data"][case.heads], case.causal)
        where = f"{FUNCTION[variant]}, {p} ranks, {case.heads}, causal={case.causal}"
        for rank in range(p):
            for key in ("output", "grad_q", "grad_k", "grad_v"):
                if key not in got[rank]:
                    raise AssertionError(f"{where}: rank {rank} returned no {key}")
                assert_matches(
                    got[rank][key],
                    cut(want[key], variant, p, rank),
                    f"{where}, rank {rank}: {key} (against SDPA on the whole sequence, cut as this rank's shard)",
                    *TOL,
                )


@pytest.mark.points(8)
@pytest.mark.parametrize("p", [2, 4])
def test_ring_attention_matches_sdpa_on_the_whole_sequence(submission, p):
    check_variant(submission, p, "ring")


@pytest.mark.points(6)
@pytest.mark.parametrize("p", [2, 4])
def test_zigzag_ring_attention_matches_sdpa_on_the_whole_sequence(submission, p):
    check_variant(submission, p, "zigzag")


@pytest.mark.points(5)
@pytest.mark.parametrize("p", [2, 4])
def test_ulysses_attention_matches_sdpa_on_the_whole_sequence(submission, p):
    check_variant(submission, p, "ulysses")


@pytest.mark.points(4)
@pytest.mark.parametrize("p", [2, 4])
def test_allgather_kv_attention_matches_sdpa_on_the_whole_sequence(submission, p):
    check_variant(submission, p, "allgather_kv")


@pytest.mark.points(2)
def test_every_variant_on_a_world_of_one_is_attention_on_the_whole_sequence(submission):
    """A group of one rank holds the whole sequence: every variant, causal and not, forward and
    backward, equals SDPA with no message to send (a ring of one has no neighbour to pass to)."""
    for variant in FUNCTION:
        check_variant(submission, 1, variant)


@pytest.mark.points(2)
@pytest.mark.parametrize("p", [2, 4])
def test_zigzag_shard_and_unshard_match_their_definitions(submission, p):
    run = run_cases(submission, p)
    x, n = run["x"], len(CASES)
    for rank in range(p):
        shard, whole = run["result"].steps[rank][n], run["result"].steps[rank][n + 1]
        assert_matches(
            shard,
            zigzag(x, p, rank),
            f"zigzag_shard on {p} ranks, rank {rank}: chunks {rank} and {2 * p - 1 - rank} of {2 * p}",
        )
        assert_matches(whole, x, f"zigzag_unshard on {p} ranks, rank {rank}: the whole sequence in order")


@pytest.mark.points(4)
def test_ring_attention_stays_finite_on_large_logits_and_keeps_low_precision_dtypes(submission):
    """Causal ring attention, both layouts, 4 ranks, GQA 4/2, forward: q scaled so the logits are
    about 1e3 (float64, tight: the merge must subtract the maximum), and bfloat16 and float16
    inputs (the output has q's dtype; values within 16 eps of SDPA in float64 on the same values)."""
    p, gen = 4, generator("cp-extremes")
    whole = [torch.randn(1, h, 8 * p, 8, generator=gen, dtype=torch.float64) for h in (4, 2, 2)]
    data = {dtype: [(x * scale if i == 0 else x).to(dtype) for i, x in enumerate(whole)] for dtype, scale in EXTREMES}
    cases = [(dtype, layout) for dtype, _ in EXTREMES for layout in ("contiguous", "zigzag")]
    variant = {"contiguous": "ring", "zigzag": "zigzag"}
    steps = [
        [
            Step(
                "ring_step",
                tuple(cut(x, variant[layout], p, r) for x in data[dtype]),
                {"causal": True, "layout": layout},
            )
            for dtype, layout in cases
        ]
        for r in range(p)
    ]
    ranks = submission.script_spmd(p, steps).steps
    for i, (dtype, layout) in enumerate(cases):
        name = str(dtype).removeprefix("torch.")
        want = F.scaled_dot_product_attention(
            *(x.to(torch.float64) for x in data[dtype]), is_causal=True, enable_gqa=True
        )
        if dtype == torch.float64:
            tol, what = TOL, "logits of about 1e3: merge by differences of log-sum-exps (subtract the maximum)"
        else:
            tol, what = (
                (16 * torch.finfo(dtype).eps,) * 2,
                f"within 16 eps of SDPA in float64 on the same {name} values",
            )
        where = f"ring_attention(causal=True, layout={layout!r}) on 4 ranks, {name} inputs, rank"
        for r in range(p):
            got = ranks[r][i]["output"]
            if got.dtype != dtype:
                returned = str(got.dtype).removeprefix("torch.")
                raise AssertionError(
                    f"{where} {r}: ring_attention returned {returned} for {name} inputs; the docstring promises "
                    f"q's dtype ({name})"
                )
            assert_matches(
                got.to(torch.float64), cut(want, variant[layout], p, r), f"{where} {r}: output ({what})", *tol
            )
