"""Hidden suite, counted performance (no timing):

- bytes each rank sends, counted by the kernel (wchar), on a world of 4 (s = 48, GQA 8 query and
  4 kv heads, d = 8, float64): ring attention's forward at most p-1 hops of its K/V block, its
  backward at most p-1 hops of the K/V blocks and p-1 of their gradients (reference.cp_comm_bytes)
  plus BYTES_SLACK_PER_MESSAGE of gloo framing per message, less in all than one K block (one
  extra hop fails); Ulysses and all-gathered K/V at most what torch.distributed's own collectives
  of the same plan send in a trusted world of 4 (gloo's reduce_scatter is an all-reduce: twice
  the ideal), recorded beside the ideal figures.
- the kind of every collective (probe "groups", on the configuration sweep's world of 4,
  reference.run_sweep): the ring only sends and receives, Ulysses only all-to-alls, all-gathered
  K/V all-gathers in forward and reduce-scatters in backward (never an all-reduce: on gloo it
  sends the bytes of a reduce-scatter, so only the kind tells them apart).
- the largest tensor any operator makes during ring attention's forward and backward (probe
  "largest") at most one block of scores, b*h_q*s_local*s_local, or the K/V block pair a rank
  holds and sends, whichever is larger: no rank holds the whole K or V, nor scores of the whole
  sequence.
- attention FLOPs per rank (FlopCounterMode, forward and backward): causal with contiguous shards,
  rank r at most (r+1)/p of the non-causal figure (hidden blocks skipped); zigzag, every rank
  within 3 % of the mean and at most (p+1)/(2p) of the non-causal figure.
- overlap, from the worker's order of point-to-point calls and matmuls (probe "p2p", installed by
  the grader around the step): at least 2(p-1) receives of a rank (the next K/V block in forward
  and in backward) are posted before a matmul that runs before their wait.
"""

from __future__ import annotations

import pytest

from grader.sandbox import Step
from grader.suites.context_parallel.reference import (
    BATCH,
    HEAD_DIM,
    HEADS,
    NAMED_KINDS,
    S_LOCAL,
    SWEEP_CASES,
    SWEEP_GROUPS,
    Case,
    call_name,
    case_outputs,
    cp_comm_bytes,
    cut,
    make_data,
    run_cases,
    run_sweep,
)

# gloo frames every message it sends: 144 bytes with torch 2.13's gloo (the reference's forward
# on 4 ranks sends 3 K/V messages of 12,288 bytes: 36,864 + 432); 256 are allowed. A correct ring
# sends at most 6(p-1) messages per rank (K, V, dK and dV each apart: 2(p-1) forward, 4(p-1)
# backward), so the slack of a rank's forward and backward is 256 * 6 * 3 = 4,608 bytes at p = 4,
# less than the smallest block it could send once too often, one K (or dK) of b * h_kv * s_local
# * d * 8 = 2 * 4 * 12 * 8 * 8 = 6,144 bytes: one extra message of any block fails the check.
# (With s_local = 8, one K block was 4,096 bytes, and 36 messages' slack allowed an extra hop.)
BYTES_SLACK_PER_MESSAGE = 256
BYTES_P, BYTES_S_LOCAL = 4, 12
BYTE_RUNS: dict[tuple, object] = {}


def _sizes(p: int, heads: str) -> tuple:
    h_q, h_kv = HEADS[heads]
    return BYTES_S_LOCAL * p, BATCH, h_q, h_kv, HEAD_DIM, p, 8


def byte_run(submission, variant: str, backward: bool):
    """bytes_sent of one layer (forward, or forward and backward) of a variant on BYTES_P ranks."""
    key = (id(submission), variant, backward)
    if key not in BYTE_RUNS:
        p, data = BYTES_P, make_data(BYTES_P, "gqa", "bytes", s_local=BYTES_S_LOCAL)
        steps = []
        for r in range(p):
            q, k, v, grad = (cut(data[n], variant, p, r) for n in ("q", "k", "v", "grad"))
            grad = grad if backward else None
            if variant == "ring":
                steps.append([Step("ring_step", (q, k, v, grad, False))])
            else:
                steps.append([Step("cp_step", (variant, q, k, v, grad, False))])
        BYTE_RUNS[key] = submission.script_spmd(p, steps).bytes_sent
    return BYTE_RUNS[key]


@pytest.mark.perf
@pytest.mark.points(8)
def test_ring_attention_sends_p_minus_1_kv_blocks_forward_and_twice_that_backward(submission, record_property):
    p = BYTES_P
    forward, total = byte_run(submission, "ring", False), byte_run(submission, "ring", True)
    if not any(total):
        pytest.skip("no bytes were counted: the messages did not go through sockets")
    ideal_forward, ideal_backward = cp_comm_bytes("ring", *_sizes(p, "gqa"))
    # the most messages a correct ring sends: K and V apart in forward, and dK and dV in backward
    forward_messages, backward_messages = 2 * (p - 1), 4 * (p - 1)
    allowed_forward = ideal_forward + BYTES_SLACK_PER_MESSAGE * forward_messages
    allowed_total = allowed_forward + ideal_backward + BYTES_SLACK_PER_MESSAGE * backward_messages
    block = ideal_forward // (2 * (p - 1))
    record_property("forward_bytes_per_rank", forward)
    record_property("backward_bytes_per_rank", [t - f for t, f in zip(total, forward)])
    record_property("cp_comm_bytes", [ideal_forward, ideal_backward])
    record_property("slack_bytes", allowed_total - ideal_forward - ideal_backward)
    record_property("smallest_block_bytes", block)
    where = (
        f"ring_attention on {p} ranks (s = {BYTES_S_LOCAL * p}, b = {BATCH}, 8 query and 4 kv heads, "
        f"d = {HEAD_DIM}, float64: one K or V block is {block:,} bytes)"
    )
    for rank in range(p):
        assert forward[rank] <= allowed_forward, (
            f"{where}: rank {rank}'s forward sent {forward[rank]:,} bytes; p-1 = {p - 1} hops of its K and V "
            f"blocks are {ideal_forward:,} ({allowed_forward:,} allowed). Send K and V as they are (h_kv heads, "
            f"not repeated per query head), one block per hop, never the whole sequence"
        )
        assert total[rank] <= allowed_total, (
            f"{where}: rank {rank} sent {total[rank]:,} bytes in forward and backward; the forward's "
            f"{ideal_forward:,} and the backward's p-1 hops of the K/V blocks and p-1 of their gradients "
            f"({ideal_backward:,}) allow {allowed_total:,}. A block's gradients start at the first rank the block "
            f"reaches, not at its owner: the (p-1)-th hop brings them home"
        )


@pytest.mark.perf
@pytest.mark.points(4)
@pytest.mark.parametrize("variant", ["ulysses", "allgather_kv"])
def test_ulysses_and_allgather_kv_send_no_more_than_the_librarys_collectives(
    submission, library, variant, record_property
):
    p = BYTES_P
    sent = byte_run(submission, variant, True)
    if not any(sent):
        pytest.skip("no bytes were counted: the collectives did not go through sockets")
    baseline = library.spmd(
        "grader.suites.context_parallel.reference:library_collectives",
        p,
        [(variant, p, "gqa", True, BYTES_S_LOCAL)] * p,
    )
    calls = 8 if variant == "ulysses" else 4
    allowed = max(baseline.bytes_sent) * 1.001 + BYTES_SLACK_PER_MESSAGE * calls * (p - 1)
    record_property("bytes_sent_per_rank", sent)
    record_property("library_bytes_per_rank", baseline.bytes_sent)
    record_property("cp_comm_bytes", list(cp_comm_bytes(variant, *_sizes(p, "gqa"))))
    record_property("bytes_allowed", int(allowed))
    plan = "8 all_to_all_single" if variant == "ulysses" else "2 all_gather_single and 2 reduce_scatter_single"
    for rank in range(p):
        assert sent[rank] <= allowed, (
            f"{variant} on {p} ranks (GQA 8/4 heads, s = {BYTES_S_LOCAL * p}): rank {rank} sent {sent[rank]:,} "
            f"bytes in forward and backward; torch.distributed's {plan} of the layer send {max(baseline.bytes_sent):,} "
            f"({int(allowed):,} allowed)"
        )


def _ring_cases() -> list[Case]:
    return [Case(v, h, c) for v in ("ring", "zigzag") for h in HEADS for c in (False, True)]


@pytest.mark.perf
@pytest.mark.points(6)
@pytest.mark.parametrize("p", [2, 4])
def test_ring_attention_holds_one_block_of_scores_at_most(submission, p, record_property):
    run = run_cases(submission, p)
    largest = {}
    for case in _ring_cases():
        _, measured = case_outputs(run, case)
        h_q, h_kv = HEADS[case.heads]
        scores = BATCH * h_q * S_LOCAL * S_LOCAL
        pair = 2 * BATCH * h_kv * S_LOCAL * HEAD_DIM
        allowed = max(scores, pair, BATCH * h_q * S_LOCAL * HEAD_DIM)
        largest[case.id] = [m["largest"] for m in measured]
        for rank, figures in enumerate(measured):
            assert figures["largest"] <= allowed, (
                f"ring_attention, {case.id}, {p} ranks: rank {rank} made a tensor of {figures['largest']:,} "
                f"elements ({figures['largest_op']}); one block of scores is b*h_q*s_local^2 = {scores:,} and "
                f"the K/V pair of one block {pair:,}. Never gather K or V, nor the scores of the whole sequence: "
                f"merge each block into the output as it arrives"
            )
    record_property("largest_elements_per_case", largest)
    record_property("one_score_block", {h: BATCH * HEADS[h][0] * S_LOCAL * S_LOCAL for h in HEADS})


@pytest.mark.perf
@pytest.mark.points(8)
@pytest.mark.parametrize("p", [2, 4])
def test_causal_ring_skips_hidden_blocks_and_zigzag_balances_the_flops(submission, p, record_property):
    run = run_cases(submission, p)
    flops = {c.id: [m["flops"] for m in case_outputs(run, c)[1]] for c in _ring_cases()}
    record_property("flops_per_rank", flops)
    for heads in HEADS:
        full = flops[f"ring-{heads}-full"]
        contiguous, zz = flops[f"ring-{heads}-causal"], flops[f"zigzag-{heads}-causal"]
        if contiguous[0]:
            record_property(f"contiguous_last_over_first_{heads}", contiguous[-1] / contiguous[0])
        for rank in range(p):
            bound = (rank + 1) / p * full[rank] * 1.01
            assert contiguous[rank] <= bound, (
                f"ring_attention, causal, contiguous shards, {p} ranks, {heads}: rank {rank} counted "
                f"{contiguous[rank]:,} FLOPs, the non-causal ring {full[rank]:,}; it sees only {rank + 1} of the "
                f"{p} blocks (at most {int(bound):,}). Skip the blocks the mask hides completely"
            )
        mean = sum(zz) / p
        zz_bound = (p + 1) / (2 * p) * full[0] * 1.01
        for rank in range(p):
            assert abs(zz[rank] - mean) <= 0.03 * mean and zz[rank] <= zz_bound, (
                f"ring_attention, causal, zigzag, {p} ranks, {heads}: FLOPs per rank {zz} (mean {mean:,.0f}); "
                f"each rank's must be within 3 % of the mean and at most (p+1)/(2p) of the non-causal "
                f"{full[0]:,} ({int(zz_bound):,}): against an earlier rank's block only its first chunk, "
                f"against a later rank's block only your second chunk of queries, and nothing hidden"
            )


@pytest.mark.perf
@pytest.mark.points(6)
@pytest.mark.parametrize("p", [2, 4])
def test_ring_attention_posts_the_next_block_before_computing_on_this_one(submission, p, record_property):
    run = run_cases(submission, p)
    seen = {}
    for case in (Case("ring", "mha", False), Case("zigzag", "gqa", True)):
        _, measured = case_outputs(run, case)
        seen[case.id] = [m["p2p"] for m in measured]
        for rank, figures in enumerate(measured):
            order = figures["p2p"]
            assert order["overlapped_receives"] >= 2 * (p - 1), (
                f"ring_attention, {case.id}, {p} ranks: rank {rank} posted {order['receives']} receives, of which "
                f"{order['overlapped_receives']} had a matmul between their post and their wait; forward and "
                f"backward each need p-1 = {p - 1} (post the receive of the next K/V block, and the send of this "
                f"one, with dist.isend/irecv or batch_isend_irecv BEFORE computing on this block; wait after). "
                f"Order seen (S send, R receive, M matmuls, W wait with no matmul since the post, w after one): "
                f"{order['trace']}"
            )
    record_property("p2p_order", seen)


@pytest.mark.perf
@pytest.mark.points(4)
def test_every_variant_calls_only_the_collectives_its_docstring_names(submission, record_property):
    """Every ProcessGroup call (probe "groups") of each layer of the configuration sweep (groups
    of 3 and of 1 in a world of 4, causal and not): the ring's are sends and receives, Ulysses'
    all-to-alls, all-gathered K/V's all-gathers in forward (its forward run alone) and
    reduce-scatters in backward (the calls after the forward's), and in a group of several ranks
    each phase calls them. On gloo an all-reduce of the whole gradient sends what a reduce-scatter
    sends, so the bytes cannot tell them apart."""
    run = run_sweep(submission)
    measured, index = run["result"].measurements, run["index"]
    seen = {}
    for group in SWEEP_GROUPS:
        for case in SWEEP_CASES:
            forward_kinds, backward_kinds, named = NAMED_KINDS[case.variant]
            for g, r in enumerate(group):
                calls = [c["op"] for c in measured[r][index[("layer", case)]]["groups"]]
                if ("forward", case) in index:
                    ahead = len(measured[r][index[("forward", case)]]["groups"])
                    phases = (("forward", calls[:ahead], forward_kinds), ("backward", calls[ahead:], backward_kinds))
                else:
                    phases = (("forward and backward", calls, forward_kinds | backward_kinds),)
                seen[f"{case.id} {group} rank {r}"] = calls
                for phase, ops, allowed in phases:
                    wrong = [op for op in ops if op not in allowed]
                    why = (
                        " (an all-reduce of the whole gradient, then a slice, gives the right gradients but sends "
                        "twice a reduce-scatter's bytes on NCCL)"
                        if wrong and wrong[0].startswith("allreduce")
                        else ""
                    )
                    assert not wrong, (
                        f"{case.variant} (causal={case.causal}) in the cp group of global ranks {group}, global rank "
                        f"{r} (group rank {g}): its {phase} called {call_name(wrong[0])}{why}; the docstring names "
                        f"{named}. Calls seen in its {phase}, in order: {', '.join(map(call_name, ops))}"
                    )
                    # and the named ones do run: in a group of several ranks every phase communicates
                    assert ops or len(group) == 1, (
                        f"{case.variant} (causal={case.causal}) in the cp group of global ranks {group}, global rank "
                        f"{r} (group rank {g}): its {phase} called no collective of the group at all; the docstring "
                        f"names {named} (a collective over another group, or none, cannot give this group's result)"
                    )
    record_property("calls_per_layer", seen)
