"""Hidden suite: every variant equals one process. On gloo worlds of 2 and 4 ranks (one call per
world: reference.run_cases), ring attention (contiguous and zigzag), Ulysses and all-gathered K/V,
causal and not, MHA and GQA, float64, forward and backward: the output and the gradients of q, k
and v of each rank's shard against F.scaled_dot_product_attention on the whole sequence
(enable_gqa) cut the same way; every variant again on a world of one rank, where it is plain
attention. zigzag_shard and zigzag_unshard by their definitions."""

from __future__ import annotations

import pytest

from grader.suites.context_parallel.reference import CASES, case_outputs, cut, run_cases, sdpa_reference, zigzag
from grader.testing import assert_matches

TOL = (1e-10, 1e-10)
FUNCTION = {
    "ring": "ring_attention",
    "zigzag": "ring_attention(layout='zigzag')",
    "ulysses": "ulysses_attention",
    "allgather_kv": "allgather_kv_attention",
}


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
