"""Hidden suite, counted performance (no timing):

- checkpointing: bytes autograd saves during the forward (saved_tensors_hooks, in the given
  saved_bytes_and_grads) at most the segment boundaries: segments * rows * width * 8 (float64);
  the plain forward saves n + 1 such tensors. Segments that divide the blocks and segments that
  do not (7 blocks in 3, 10 in 4, 5 in 2, 8 in 3), fixed cases.
- DDP communication, counted through dist.all_reduce by the given train_ddp: every gradient
  element once per step, in no more calls than the docstring's buckets (reference.py's
  greedy_buckets), and at least one call issued before loss.backward() returns (overlap).
- DDP time: the given train_ddp on the "deep" model (32 layers, 64 parameters, one bucket),
  TIME_STEPS steps on 2 ranks, timed by the grader (wall time of the whole call, construction
  included) against the same training with torch.nn.parallel.DistributedDataParallel in a
  trusted world, rounds interleaved.
- ZeRO memory, counted by the given train_sharded: this rank's inner optimizer state bytes at
  most 1/p of the unsharded state plus the largest parameter's state; in stage 2 the gradient
  bytes this rank holds after step at most 1/p of all gradients plus the largest one.
"""

from __future__ import annotations

import pytest
import torch

from grader.perf import best_ratio, interleaved_ratio, require_reliable
from grader.sandbox import CallResult, Saved, Step
from grader.suites.zero.reference import MLP, greedy_buckets, make_data, make_state, rank_slice
from grader.testing import generator

WIDTH, ROWS, BLOCKS, SEGMENTS = 8, 4, 16, 4
CAP_MB = 0.0015  # 1572 bytes: 3 buckets (a weight with its neighbouring biases) for 6 parameters


# (blocks, segments): segments dividing the blocks, and not (groups of 3, 2, 2 for 7 in 3: a group
# size of len(blocks) // segments would make 4 groups, and save 4 inputs)
CHECKPOINT_CASES = [(BLOCKS, SEGMENTS), (7, 3), (10, 4), (5, 2), (8, 3)]


@pytest.mark.perf
@pytest.mark.points(8)
def test_checkpointing_saves_only_segment_boundaries(submission, record_property):
    steps, boundary = [], ROWS * WIDTH * 8
    x = torch.randn(ROWS, WIDTH, generator=generator("ckpt-bytes"), dtype=torch.float64)
    for blocks, segments in CHECKPOINT_CASES:
        steps += [
            Step("make_blocks", (blocks, WIDTH, 0), save_as="blocks", send_back=False),
            Step("checkpointed_forward", (Saved("blocks"), x, segments), send_back=False),
            Step("saved_bytes_and_grads", (blocks, WIDTH, 0, x, segments)),
            Step("saved_bytes_and_grads", (blocks, WIDTH, 0, x, None)),
        ]
    results = submission.script(steps).steps[0]
    figures = []
    for index, (blocks, segments) in enumerate(CHECKPOINT_CASES):
        checkpointed, plain = (r["saved_bytes"] for r in results[4 * index + 2 : 4 * index + 4])
        figures.append({"blocks": blocks, "segments": segments, "checkpointed": checkpointed, "plain": plain})
    record_property("saved_bytes_checkpointed", figures[0]["checkpointed"])
    record_property("saved_bytes_plain", figures[0]["plain"])
    record_property("bound", SEGMENTS * boundary)
    record_property("cases", figures)
    for case in figures:
        blocks, segments, checkpointed, plain = case["blocks"], case["segments"], case["checkpointed"], case["plain"]
        uneven = "" if blocks % segments == 0 else f" ({segments} groups of nearly equal size, e.g. 3, 2, 2 for 7 in 3)"
        assert checkpointed <= segments * boundary, (
            f"with {blocks} blocks in {segments} segments the forward saved {checkpointed} bytes for backward "
            f"(the plain forward saves {plain}, one input is {boundary}); only the {segments} segment inputs "
            f"({segments * boundary} bytes) may be kept{uneven}: cut the blocks into exactly `segments` groups, "
            f"run each under torch.no_grad() and save only its input"
        )


def ddp_stats(submission, world_size: int = 2) -> list[dict]:
    state = make_state("plain", "perf")
    inputs, targets = make_data(world_size, "perf")
    steps = [
        [Step("train_ddp", ("plain", state, "adamw", 0.01, rank_slice(inputs, r), rank_slice(targets, r), CAP_MB))]
        for r in range(world_size)
    ]
    return [rank[-1] for rank in submission.script_spmd(world_size, steps).steps]


@pytest.mark.perf
@pytest.mark.points(5)
def test_ddp_allreduces_each_gradient_once_in_buckets(submission, record_property):
    results = ddp_stats(submission)
    elements = sum(p.numel() for p in MLP("plain").parameters())
    buckets = len(greedy_buckets("plain", CAP_MB))
    record_property("calls_per_step", results[0]["calls"])
    record_property("elements_per_step", results[0]["elements"])
    record_property("buckets", buckets)
    for rank, result in enumerate(results):
        for step, (calls, sent) in enumerate(zip(result["calls"], result["elements"])):
            assert sent == elements, (
                f"rank {rank}, step {step}: dist.all_reduce carried {sent} elements, the gradients have {elements}: "
                f"each gradient element must be all-reduced exactly once per step (no duplicate or missing bucket)"
            )
            assert calls <= buckets, (
                f"rank {rank}, step {step}: {calls} dist.all_reduce calls, but bucket_cap_mb={CAP_MB} gives "
                f"{buckets} buckets: all-reduce one flattened bucket at a time, not one parameter at a time"
            )


@pytest.mark.perf
@pytest.mark.points(7)
def test_ddp_starts_allreduce_while_backward_is_running(submission, record_property):
    results = ddp_stats(submission)
    record_property("calls_before_backward_returned", results[0]["calls_before_backward_returned"])
    for rank, result in enumerate(results):
        for step, early in enumerate(result["calls_before_backward_returned"]):
            assert early >= 1, (
                f"rank {rank}, step {step}: no dist.all_reduce had started when loss.backward() returned: "
                f"start each bucket's all_reduce (async_op=True) from the gradient hook that completes it"
            )


@pytest.mark.perf
@pytest.mark.points(6)
@pytest.mark.parametrize(
    ("world_size", "stage"), [(2, 1), (2, 2), (4, 2)], ids=["world=2-stage1", "world=2-stage2", "world=4-stage2"]
)
def test_sharded_optimizer_keeps_a_1_over_p_share_of_the_state(submission, world_size, stage, record_property):
    state = make_state("plain", "perf-sharded")
    inputs, targets = make_data(world_size, "perf-sharded")
    steps = [
        [Step("train_sharded", (state, "adamw", stage, 0.01, rank_slice(inputs, r), rank_slice(targets, r)))]
        for r in range(world_size)
    ]
    results = [rank[-1] for rank in submission.script_spmd(world_size, steps).steps]
    sizes = [4 * v.numel() for v in state.values()]
    # AdamW keeps exp_avg and exp_avg_sq (one parameter's bytes each) and a scalar step per parameter.
    full_state = sum(2 * s + 4 for s in sizes)
    state_bound = full_state / world_size + 2 * max(sizes) + 4
    grad_bound = sum(sizes) / world_size + max(sizes)
    record_property("state_bytes_per_rank", [r["state_bytes"] for r in results])
    record_property("grad_bytes_per_rank", [r["grad_bytes"] for r in results])
    record_property("unsharded_state_bytes", full_state)
    for rank, result in enumerate(results):
        assert result["state_bytes"] <= state_bound, (
            f"ZeRO stage {stage}, world={world_size}: rank {rank}'s optimizer holds {result['state_bytes']} bytes of "
            f"state; unsharded AdamW holds {full_state}: at most 1/{world_size} of it plus one parameter's share "
            f"({state_bound:.0f}) is allowed. Build the inner optimizer over this rank's parameters only"
        )
        if stage == 2:
            assert result["grad_bytes"] <= grad_bound, (
                f"ZeRO stage 2, world={world_size}: rank {rank} holds {result['grad_bytes']} bytes of gradients after "
                f"step, at most {grad_bound:.0f} (1/{world_size} of all plus the largest) is allowed: drop the "
                f"gradients of parameters this rank does not own"
            )


TIME_STEPS = 20
# Measured on the course's 2-core machine, quiet: the reference DDP 1.1-1.2x torch's DDP (one
# bucket; its constructor broadcasts each parameter), all-reducing each of the 64 parameters
# synchronously from its hook 7.6-7.8x (tests/test_zero_checks.py). 3x leaves a factor of 2.5
# on each side. With 8 layers (16 parameters) that variant measured only 3.2x: the model is
# deep so that the cost of a call per parameter dominates the step.
TIME_RATIO_LIMIT = 3.0


@pytest.mark.perf
@pytest.mark.points(5)
def test_ddp_training_time_within_3x_torch_distributed_data_parallel(submission, library, record_property):
    state = make_state("deep", "time")
    inputs, targets = make_data(2, "time", steps=TIME_STEPS)
    args = [("deep", state, "sgd", 0.01, rank_slice(inputs, r), rank_slice(targets, r), 25.0) for r in range(2)]

    def candidate() -> CallResult:
        return submission.script_spmd(2, [[Step("train_ddp", a, send_back=False)] for a in args])

    def reference() -> CallResult:
        target = "grader.suites.zero.reference:train_torch_ddp"
        return library.spmd(target, 2, args, return_result=False)

    ratio = best_ratio(lambda: interleaved_ratio(candidate, reference, rounds=3), TIME_RATIO_LIMIT)
    record_property("time_ratio_vs_torch_ddp", round(ratio.ratio, 3))
    record_property("ddp_s", round(ratio.candidate_s, 5))
    record_property("torch_ddp_s", round(ratio.reference_s, 5))
    require_reliable(ratio)
    assert ratio.ratio <= TIME_RATIO_LIMIT, (
        f"{TIME_STEPS} DDP training steps took {ratio.candidate_s * 1e3:.1f} ms, {ratio.ratio:.1f}x torch's "
        f"DistributedDataParallel ({ratio.reference_s * 1e3:.1f} ms); the limit is {TIME_RATIO_LIMIT:g}x. "
        f"All-reduce one flattened bucket at a time, asynchronously, not each parameter on its own."
    )
