"""Hidden suite: run_schedule in a pipeline group that is not the world. In a world of 4, ranks
{0, 2} run one 2-stage pipeline and ranks {1, 3} another (the layout of two data-parallel
replicas, each pipelined over 2 ranks), at once, each on its own model and batch, through the
given train_pipeline with the interleaved schedule (v = 2: activations and gradients cross in
both directions between the two ranks of a pipeline).

Each pipeline's gradients must equal one process's on its whole model and batch (torch autograd,
reference.py). A submission that takes the global rank for the stage, the world's size for p, or
a group rank for the peer of send_tensors/recv_tensors (which take global ranks) crosses into
the other pipeline, deadlocks or fails. Bytes per rank, counted by the kernel, are held to the
messages the schedule implies: each activation and gradient across its boundary once, plus the
slack of grader/perf.py (it covers the few hundred bytes of building the groups).

Both checks read one world-of-4 call, run once per submission. Below them: a world of 5 whose
pipelines of 3 and 2 ranks ({0, 2, 3} and {1, 4}: neither contiguous nor strided) run at once.
"""

from __future__ import annotations

import pytest
import torch

from grader.perf import with_slack
from grader.sandbox import Group, Step
from grader.suites.pipeline_parallel.reference import one_process_grads, schedule
from grader.testing import assert_matches, generator

WIDTH, ROWS, M, V = 64, 32, 4, 2
# send_tensors posts 3 isends per message (length, header, tensor), each with gloo's own header:
# about 160 bytes measured per isend, next to 4 kB of payload per message here.
ISEND_BYTES = 256
PIPELINES = ((0, 2), (1, 3))  # global ranks; the i-th holds stages i and i + 2
NUM_LAYERS = 2 * 2 * V

RUNS: dict[int, tuple] = {}


def pipeline_data(ranks: tuple[int, ...]) -> tuple[int, torch.Tensor, torch.Tensor]:
    gen = generator("pipeline-groups", ranks)
    inputs = torch.randn(ROWS, WIDTH, generator=gen, dtype=torch.float64)
    return 17 + ranks[0], inputs, torch.randn(ROWS, WIDTH, generator=gen, dtype=torch.float64)


def run_pipelines(submission):
    """Every global rank's train_pipeline result, and the call's bytes per rank."""
    if id(submission) not in RUNS:
        steps = [None] * 4
        for ranks in PIPELINES:
            seed, inputs, targets = pipeline_data(ranks)
            args = ("run_schedule", schedule("interleaved", 2, M, V), "dense", NUM_LAYERS, seed, inputs, targets)
            for rank in ranks:
                steps[rank] = [Step("train_pipeline", (*args, Group(ranks)))]
        RUNS[id(submission)] = submission.script_spmd(4, steps)
    return RUNS[id(submission)]


def where(ranks: tuple[int, ...]) -> str:
    other = PIPELINES[1 - PIPELINES.index(ranks)]
    return (
        f"interleaved (p=2, m={M}, v={V}) in the pipeline group {list(ranks)} of a world of 4, while ranks "
        f"{list(other)} ran another pipeline"
    )


@pytest.mark.points(4)
def test_run_schedule_in_two_pipeline_groups_of_a_world_of_4_matches_one_process_each(submission):
    result = run_pipelines(submission)
    for ranks in PIPELINES:
        seed, inputs, targets = pipeline_data(ranks)
        expected = one_process_grads("dense", NUM_LAYERS, seed, inputs, targets)
        got = {name: grad for rank in ranks for name, grad in result.steps[rank][0]["grads"].items()}
        assert got.keys() == expected.keys(), (
            f"{where(ranks)}: the two ranks returned gradients of {sorted(got)}, expected {sorted(expected)}: "
            f"stage i lives on group rank i (dist.get_rank(group)), p is the group's size"
        )
        for name, want in expected.items():
            assert got[name] is not None, f"{where(ranks)}: {name} has no gradient after run_schedule"
            assert_matches(
                got[name],
                want,
                f"{where(ranks)}: gradient of {name} (one process on the pipeline's whole batch expected; "
                f"send to and receive from dist.get_global_rank(group, i ± 1))",
                1e-9,
                1e-12,
            )


@pytest.mark.perf
@pytest.mark.points(2)
def test_run_schedule_in_pipeline_groups_sends_each_message_once_to_its_neighbour(submission, device, record_property):
    result = run_pipelines(submission)
    if not any(result.bytes_sent) and device == "cuda":
        pytest.skip("no bytes were counted: NCCL moves data where the kernel does not count it")
    # A rank holds stages i and i + 2 and sends 3 of the 6 crossings per microbatch: the
    # activations out of its two chunks but the last stage's, the gradients out of all but stage 0.
    payload, isends = 3 * ROWS * WIDTH * 8, 3 * M * 3
    allowed = with_slack(payload + isends * ISEND_BYTES)
    record_property("bytes_sent_per_rank", result.bytes_sent)
    record_property("payload_bytes_per_rank", payload)
    for rank, sent in enumerate(result.bytes_sent):
        assert sent <= allowed, (
            f"rank {rank} sent {sent:,} bytes; its activations and gradients in the pipeline group are "
            f"{payload:,} bytes (+ {isends} isends' headers and slack: {int(allowed):,}): send each once, to "
            f"the group's neighbour only"
        )


# ------------------------------------------------------------------ groups of different sizes

# A world of 5: ranks {0, 2, 3} run a 3-rank interleaved pipeline while ranks {1, 4} run a 2-rank
# zero-bubble one, at once. Neither group is ranks 0..p-1, a contiguous block or evenly strided:
# a neighbour taken as global rank +- world_size // p (Megatron's layout of pipeline groups, and
# that of the world-of-4 test above) or a stage taken as global // p is wrong in one of them.
# p = 3 is not a power of two, and the layer and microbatch counts split unevenly (7 layers in 6
# stages, 13 rows in 6 and in 5 microbatches).
UNEVEN_WORLD = 5
UNEVEN_WIDTH, UNEVEN_ROWS = 16, 13
UNEVEN_PIPELINES = {  # global ranks -> (schedule, its arguments, layers)
    (0, 2, 3): ("interleaved", (3, 6, 2), 7),
    (1, 4): ("zero_bubble", (2, 5), 5),
}
UNEVEN_RUNS: dict[int, object] = {}


def uneven_pipeline_data(ranks: tuple[int, ...]) -> tuple[int, torch.Tensor, torch.Tensor]:
    gen = generator("pipeline-uneven-groups", ranks)
    inputs = torch.randn(UNEVEN_ROWS, UNEVEN_WIDTH, generator=gen, dtype=torch.float64)
    return 29 + ranks[-1], inputs, torch.randn(UNEVEN_ROWS, UNEVEN_WIDTH, generator=gen, dtype=torch.float64)


def run_uneven_pipelines(submission):
    if id(submission) not in UNEVEN_RUNS:
        steps = [None] * UNEVEN_WORLD
        for ranks, (name, args, layers) in UNEVEN_PIPELINES.items():
            seed, inputs, targets = uneven_pipeline_data(ranks)
            planned = schedule(name, *args)
            for rank in ranks:
                arguments = ("run_schedule", planned, "dense", layers, seed, inputs, targets, Group(ranks))
                steps[rank] = [Step("train_pipeline", arguments)]
        UNEVEN_RUNS[id(submission)] = submission.script_spmd(UNEVEN_WORLD, steps)
    return UNEVEN_RUNS[id(submission)]


@pytest.mark.points(2)
def test_run_schedule_in_pipeline_groups_of_3_and_2_of_a_world_of_5_matches_one_process_each(submission):
    result = run_uneven_pipelines(submission)
    for ranks, (name, args, layers) in UNEVEN_PIPELINES.items():
        seed, inputs, targets = uneven_pipeline_data(ranks)
        other = next(group for group in UNEVEN_PIPELINES if group != ranks)
        where = (
            f"{name}{args} with {layers} layers in the pipeline group {list(ranks)} of a world of 5, while ranks "
            f"{list(other)} ran another pipeline"
        )
        expected = one_process_grads("dense", layers, seed, inputs, targets)
        got = {name: grad for rank in ranks for name, grad in result.steps[rank][0]["grads"].items()}
        assert got.keys() == expected.keys(), (
            f"{where}: the ranks returned gradients of {sorted(got)}, expected {sorted(expected)}: stage i lives on "
            f"group rank i (dist.get_rank(group)), p is the group's size"
        )
        for param, want in expected.items():
            assert got[param] is not None, f"{where}: {param} has no gradient after run_schedule"
            assert_matches(
                got[param],
                want,
                f"{where}: gradient of {param} (one process on the pipeline's whole batch expected; the peers are "
                f"dist.get_global_rank(group, i ± 1), whatever the layout of the groups)",
                1e-9,
                1e-12,
            )
        left = [result.steps[rank][0]["sends_not_waited"] for rank in ranks]
        assert not any(left), f"{where}: run_schedule returned with {left} (per rank) of its sends never waited on"
