"""Hidden suite, counted performance (no timing), on the block runs of the equality checks
(reference.run_block: one call per case) and on the vocabulary-parallel loss:

- collectives per layer, counted through torch.distributed by the given block_step, as
  Megatron-Core makes them (reference.expected_collectives): TP two all-reduces of s*b*h
  elements in forward and two in backward; SP two all-gathers and two reduce-scatters of s*b*h
  in forward, four all-gathers and two reduce-scatters in backward (each column layer gathers
  its input again); nothing else.
- bytes each rank sends during the layer's forward and backward, counted by the kernel (wchar,
  grader/sandbox/pool.py), at most what the library's own collectives of that plan send in a
  trusted world of the same size in the same run (reference.library_collectives), plus
  BYTES_SLACK_PER_CALL per collective for gloo's framing. gloo implements reduce_scatter with an
  all-reduce (measured, torch 2.13: 2(p-1)/p of the tensor per rank, as much as an all-reduce),
  so on gloo SP sends more than TP; the ideal ring figures (8(p-1)/p * s*b*h * 8 bytes for TP,
  10(p-1)/p * s*b*h * 8 for SP) are recorded beside them.
- bytes the LayerNorms save for backward (saved_tensors_hooks in block_step): with SP at most
  1/p of what the two LayerNorms of the whole sequence save (input s*b*h and mean and rstd of
  s*b each, in float64), and not zero.
- bytes the whole block saves for backward (block_step's saved_bytes, every region): at most
  reference.block_saved_elements * 8, the exact figure of the reference (SDPA with enable_gqa on
  CPU, float64, no dropout), so that a column layer that keeps its gathered input under SP
  fails; a submission that recomputes and saves less passes. A sequence-parallel column layer
  alone (linear_step's saved_bytes) keeps exactly its chunk of the input.
- the loss: the largest tensor any operator makes in vocab_parallel_cross_entropy's forward and
  backward (the "largest" probe) at most tokens*V/p + tokens elements, and three all-reduces of
  `tokens` elements in forward, nothing in backward.
"""

from __future__ import annotations

import pytest
import torch

from grader.sandbox import Step
from grader.suites.tensor_parallel.reference import (
    BLOCK_CASES,
    BlockCase,
    block_saved_elements,
    collective_plan,
    counted,
    describe_calls,
    expected_collectives,
    ring_bytes,
    run_block,
)
from grader.testing import assert_matches, generator

BYTES_SLACK_PER_CALL = 256
BYTES_CASES = [c for c in BLOCK_CASES if c.heads == c.kv_heads or c.world_size == 4]
SP_CASES = [c for c in BYTES_CASES if c.sequence_parallel]


def _ids(cases: list[BlockCase]) -> list[str]:
    return [c.id for c in cases]


@pytest.mark.perf
@pytest.mark.points(4)
@pytest.mark.parametrize("case", BLOCK_CASES, ids=_ids(BLOCK_CASES))
def test_parallel_block_makes_two_collectives_of_sbh_each_way(submission, case, record_property):
    result, _ = run_block(submission, case)
    wanted = expected_collectives(case)
    record_property("forward_collectives", describe_calls(result.outputs[0]["forward"]))
    record_property("backward_collectives", describe_calls(result.outputs[0]["backward"]))
    plan = (
        "all_gather and reduce_scatter (backward: each column layer gathers its saved chunk of the input again)"
        if case.sequence_parallel
        else "all_reduce"
    )
    for rank, got in enumerate(result.outputs):
        for phase in ("forward", "backward"):
            want = wanted[phase]
            assert counted(got[phase]) == want, (
                f"ParallelBlock, {case.id}: rank {rank}'s {phase} made {describe_calls(got[phase])}; a layer needs "
                f"{describe_calls([k for k, n in want.items() for _ in range(n)])}, as Megatron-Core. Only the "
                f"{plan} around the attention and the MLP: no collective between a column and a row layer"
            )


@pytest.mark.perf
@pytest.mark.points(4)
@pytest.mark.parametrize("case", BYTES_CASES, ids=_ids(BYTES_CASES))
def test_parallel_block_sends_no_more_bytes_than_the_librarys_collectives(submission, library, case, record_property):
    result, _ = run_block(submission, case)
    p, numel = case.world_size, case.seq * case.batch * case.hidden
    plan = collective_plan(case)
    baseline = library.spmd("grader.suites.tensor_parallel.reference:library_collectives", p, [(plan, numel)] * p)
    library_bytes = max(baseline.bytes_sent)
    allowed = library_bytes * 1.001 + BYTES_SLACK_PER_CALL * len(plan)
    sent = result.bytes_sent
    record_property("bytes_sent_per_rank", sent)
    record_property("library_bytes_per_rank", baseline.bytes_sent)
    record_property("ring_bytes_per_rank", ring_bytes(case))
    record_property("bytes_allowed", int(allowed))
    if not any(sent):
        pytest.skip("no bytes were counted: the collectives did not go through sockets (NCCL over NVLink/PCIe)")
    worst = max(range(p), key=sent.__getitem__)
    assert sent[worst] <= allowed, (
        f"ParallelBlock, {case.id}: rank {worst} sent {sent[worst]:,} bytes in one forward and backward; "
        f"torch.distributed's {len(plan)} collectives of a layer ({', '.join(sorted(set(plan)))} of {numel} "
        f"float64 each) send {library_bytes:,} ({int(allowed):,} allowed). Communicate only at the f and g "
        f"operators: never gather a layer's whole output"
    )


@pytest.mark.perf
@pytest.mark.points(4)
@pytest.mark.parametrize("case", SP_CASES, ids=_ids(SP_CASES))
def test_sequence_parallel_layernorms_save_1_over_p_of_the_bytes(submission, case, record_property):
    result, _ = run_block(submission, case)
    p, tokens = case.world_size, case.seq * case.batch
    whole = 2 * (tokens * case.hidden + 2 * tokens) * 8  # two LayerNorms: input, mean, rstd (float64)
    record_property("layernorm_saved_bytes_per_rank", [r["layernorm_saved_bytes"] for r in result.outputs])
    record_property("whole_sequence_bytes", whole)
    for rank, got in enumerate(result.outputs):
        saved = got["layernorm_saved_bytes"]
        assert saved > 0, (
            f"ParallelBlock, {case.id}: nothing was saved for backward inside ln1 and ln2; call them as the "
            f"modules self.ln1 and self.ln2 (the grader counts what they save)"
        )
        assert saved <= whole // p, (
            f"ParallelBlock, {case.id}: rank {rank}'s LayerNorms saved {saved:,} bytes for backward; on the whole "
            f"sequence they save {whole:,}, and sequence parallelism keeps 1/{p} of it ({whole // p:,}): run "
            f"ln1 and ln2 on this rank's s/p positions, and gather only their outputs"
        )


@pytest.mark.perf
@pytest.mark.points(4)
@pytest.mark.parametrize("case", BLOCK_CASES, ids=_ids(BLOCK_CASES))
def test_parallel_block_saves_no_more_than_its_activations(submission, case, record_property):
    """Every region: the block's whole forward under saved_tensors_hooks (block_step), against
    the exact figure of reference.block_saved_elements (SDPA with enable_gqa, float64)."""
    result, _ = run_block(submission, case)
    allowed = block_saved_elements(case) * 8
    saved = [r["saved_bytes"] for r in result.outputs]
    record_property("saved_bytes_per_rank", saved)
    record_property("allowed_bytes", allowed)
    where = f"ParallelBlock, {case.id} (s={case.seq}, b={case.batch}, h={case.hidden}, ffn={case.ffn_hidden})"
    outside = "this rank's s/p rows" if case.sequence_parallel else "the whole sequence"
    for rank, got in enumerate(saved):
        assert got <= allowed, (
            f"{where}: rank {rank}'s forward saved {got:,} bytes for backward; the block needs {allowed:,} (the "
            f"formula of the ParallelBlock docstring: LayerNorm inputs and statistics, QKV and fc1 inputs on "
            f"{outside}; the QKV output, attention output, SDPA's logsumexp, GeLU and fc2 inputs of this rank's "
            f"heads and columns). Under sequence parallelism a column layer keeps only its chunk of the input "
            f"and all-gathers it again in backward; q, k and v go to SDPA as views (enable_gqa, no repeated copies)"
        )


@pytest.mark.perf
@pytest.mark.points(2)
@pytest.mark.parametrize("world_size", [2, 4])
def test_sequence_parallel_column_layer_keeps_only_its_chunk_of_the_input(submission, world_size, record_property):
    """ColumnParallelLinear(sequence_parallel=True) through linear_step: what its forward saves
    (SavedBytes, parameters excluded) is exactly this rank's chunk of x, (s/p, b, in) in float64,
    not the gathered (s, b, in) that torch's F.linear on the gathered input would keep."""
    rows, batch, in_features, out_features = 4 * world_size, 3, 5, 4 * world_size
    gen = generator("tp-column-saved", world_size)
    weight = torch.randn(out_features, in_features, generator=gen, dtype=torch.float64)
    x = torch.randn(rows, batch, in_features, generator=gen, dtype=torch.float64)
    grad = torch.randn(rows, batch, out_features // world_size, generator=gen, dtype=torch.float64)
    args = [
        ("column", in_features, out_features, False, weight, None, x.chunk(world_size)[r].contiguous(), grad)
        for r in range(world_size)
    ]
    result = submission.function("linear_step").spmd(world_size, args, {"sequence_parallel": True})
    chunk_bytes = rows // world_size * batch * in_features * 8
    saved = [r["saved_bytes"] for r in result.outputs]
    record_property("saved_bytes_per_rank", saved)
    record_property("chunk_bytes", chunk_bytes)
    for rank, got in enumerate(saved):
        assert got == chunk_bytes, (
            f"ColumnParallelLinear({in_features}, {out_features}, sequence_parallel=True) on {world_size} ranks, x "
            f"of {rows // world_size} rows per rank: rank {rank}'s forward saved {got:,} bytes for backward; its "
            f"chunk of x is {chunk_bytes:,} (the gathered input: {chunk_bytes * world_size:,}). Save the chunk and "
            f"all-gather it again in backward for the weight's gradient (an autograd Function), as Megatron-Core's "
            f"LinearWithGradAccumulationAndAsyncCommunication does"
        )


LOSS_TOKENS, LOSS_VOCAB = 64, 256


@pytest.mark.perf
@pytest.mark.points(6)
@pytest.mark.parametrize("world_size", [2, 4])
def test_vocab_parallel_cross_entropy_never_holds_the_whole_logits(submission, world_size, record_property):
    gen = generator("tp-loss-largest", world_size)
    logits = 3 * torch.randn(LOSS_TOKENS, LOSS_VOCAB, generator=gen, dtype=torch.float64)
    targets = torch.randint(0, LOSS_VOCAB, (LOSS_TOKENS,), generator=gen)
    grad_output = torch.rand(LOSS_TOKENS, generator=gen, dtype=torch.float64)
    shards = logits.chunk(world_size, dim=1)
    steps = [
        [Step("cross_entropy_step", (shards[r].contiguous(), targets, grad_output), measure=("largest",))]
        for r in range(world_size)
    ]
    result = submission.script_spmd(world_size, steps)
    z = logits.clone().requires_grad_(True)
    losses = torch.nn.functional.cross_entropy(z, targets, reduction="none")
    losses.backward(grad_output)
    allowed = LOSS_TOKENS * LOSS_VOCAB // world_size + LOSS_TOKENS
    largest = [m[0]["largest"] for m in result.measurements]
    record_property("largest_elements_per_rank", largest)
    record_property("largest_op", result.measurements[0][0]["largest_op"])
    record_property("allowed_elements", allowed)
    record_property("whole_logits_elements", LOSS_TOKENS * LOSS_VOCAB)
    where = f"vocab_parallel_cross_entropy, {LOSS_TOKENS} tokens, vocabulary {LOSS_VOCAB}, {world_size} ranks"
    for rank, (steps_of_rank, figures) in enumerate(zip(result.steps, result.measurements)):
        got = steps_of_rank[0]
        assert_matches(got["loss"], losses.detach(), f"{where}, rank {rank}: losses", 1e-12, 1e-12)
        assert_matches(
            got["grad"], z.grad.chunk(world_size, dim=1)[rank], f"{where}, rank {rank}: gradient", 1e-12, 1e-12
        )
        assert figures[0]["largest"] <= allowed, (
            f"{where}: rank {rank} made a tensor of {figures[0]['largest']:,} elements ({figures[0]['largest_op']}); "
            f"its shard of the logits has {LOSS_TOKENS * LOSS_VOCAB // world_size:,} ({allowed:,} allowed). Never "
            f"gather the logits: all-reduce the row max, the sum of exponentials and the target logit"
        )
        assert counted(got["forward"]) == {("all_reduce", LOSS_TOKENS): 3} and not got["backward"], (
            f"{where}, rank {rank}: forward made {describe_calls(got['forward'])}, backward "
            f"{describe_calls(got['backward'])}; expected 3 all_reduce of {LOSS_TOKENS} elements (max, sum of "
            f"exponentials, target logit), then nothing in backward"
        )
