"""Public tests for the pipeline_parallel module: run them while you work with

    pytest assignments/pipeline_parallel          (add -s to see what your code prints)

Your functions run in worker processes, never inside pytest. Schedules come back as lists and
are replayed here by the course's simulator (grader.models.pipeline.simulate: read it), which
counts the makespan, the bubble and the activations each rank holds. run_schedule runs on
worlds of 2 and 4 gloo processes, and in pipeline groups that are not the world, through the
given helper train_pipeline. The hidden suite checks many more sizes, partition against every
possible cut, the zero-bubble bound of Qi et al. 2023, run_schedule for every schedule
(two-tensor stages, float32, m that p does not divide), the activations it keeps alive (exactly
the simulator's peak), the split backward (a B whose W is in the schedule leaves .grad to that
W), and the bytes each rank sends. `make grade` gives the score.
"""

from __future__ import annotations

from fractions import Fraction

import pytest
import torch

from grader.models.pipeline import Chunk, make_layers, pipeline_loss, simulate
from grader.sandbox import Group
from grader.testing import assert_matches, expect_exception, generator


def test_partition_isolates_the_heavy_layer(submission):
    stages = submission.function("partition")([1, 1, 1, 1, 1, 1, 1, 10], 2)
    assert stages == [(0, 7), (7, 8)], f"expected [(0, 7), (7, 8)] (largest stage 10), got {stages}"


def test_partition_beats_the_greedy_fill_on_the_lectures_example(submission):
    costs = [2, 2, 2, 5, 5, 2, 2, 2]  # lecture 08, section 2: the average 7.3 misleads a greedy fill
    stages = submission.function("partition")(costs, 3)
    assert stages == [(0, 3), (3, 5), (5, 8)], (
        f"partition({costs}, 3): expected [(0, 3), (3, 5), (5, 8)] (stages 6 | 10 | 6), got {stages}: "
        f"a greedy fill misses that the two 5s belong together; search every cut (dynamic programming)"
    )


def test_partition_refuses_more_stages_than_layers(submission):
    expect_exception("ValueError", lambda: submission.function("partition")([1, 2], 3))


def test_gpipe_and_one_f_one_b_bubble_is_p_minus_1_over_m_plus_p_minus_1(submission):
    for name in ("gpipe_schedule", "one_f_one_b_schedule"):
        result = simulate(submission.function(name)(4, 8))  # F = 1, unsplit B = 2
        assert result.bubble_fraction == Fraction(3, 11), (
            f"{name}(4, 8): bubble {result.bubble_fraction}, expected 3/11"
        )


def test_one_f_one_b_holds_p_minus_rank_activations(submission):
    result = simulate(submission.function("one_f_one_b_schedule")(4, 8))
    assert result.peak_activations == [4, 3, 2, 1], (
        f"one_f_one_b_schedule(4, 8): peak activations per rank {result.peak_activations}, expected p - rank = [4, 3, 2, 1]"
    )


def test_interleaved_schedule_halves_the_bubble_with_two_chunks(submission):
    result = simulate(submission.function("interleaved_schedule")(4, 8, 2))
    assert result.bubble_fraction == Fraction(3, 19), f"bubble {result.bubble_fraction}, expected (p-1)/(vm+p-1) = 3/19"
    assert result.peak_activations == [11, 9, 7, 5], (
        f"interleaved_schedule(4, 8, 2): peak activations per rank {result.peak_activations} (chunks), expected "
        f"2(p-r-1) + (v-1)b + 1 = [11, 9, 7, 5] (lecture 08's table): warm up with 2(p-r-1) + (v-1)b forwards"
    )


def test_zero_bubble_is_faster_than_one_f_one_b_at_the_same_peak_memory(submission):
    zero_bubble = simulate(submission.function("zero_bubble_schedule")(4, 8))
    one_f_one_b = simulate(submission.function("one_f_one_b_schedule")(4, 8))
    assert max(zero_bubble.peak_activations) <= max(one_f_one_b.peak_activations), (
        f"zero-bubble peak activations {zero_bubble.peak_activations}, expected at most 1F1B's "
        f"{max(one_f_one_b.peak_activations)} on any rank"
    )
    assert zero_bubble.makespan < one_f_one_b.makespan, (
        f"zero-bubble makespan {zero_bubble.makespan}, expected less than 1F1B's {one_f_one_b.makespan}"
    )
    assert zero_bubble.makespan == 27, (
        f"zero_bubble_schedule(4, 8): makespan {zero_bubble.makespan}, expected 27 (lecture 08's table, F = B = W = 1): "
        f"the B right after a rank's last forward is already followed by the oldest pending W"
    )


def test_run_schedule_on_two_ranks_matches_one_process_and_frees_activations(submission):
    gen = generator("public-pipeline")
    inputs = torch.randn(9, 6, generator=gen, dtype=torch.float64)
    targets = torch.randn(9, 6, generator=gen, dtype=torch.float64)
    args = ("one_f_one_b_schedule", (2, 3), "dense", 4, 0, inputs, targets)
    result = submission.function("train_pipeline").spmd(2, [args, args])
    layers = make_layers("dense", 4, 6, 0, torch.float64)
    pipeline_loss(Chunk(layers)(inputs), targets, 9).backward()
    got = {**result.outputs[0]["grads"], **result.outputs[1]["grads"]}
    for i, layer in enumerate(layers):
        for name, param in layer.named_parameters():
            assert_matches(got[f"layers.{i}.{name}"], param.grad, f"gradient of layers.{i}.{name}", 1e-9, 1e-12)
    peaks = [r["peak_live"] for r in result.outputs]
    assert peaks == [2, 1], f"ranks held {peaks} forwards' saved tensors at once; 1F1B needs p - rank = [2, 1]"


# A world of 4 ranks split into pipeline groups, by global rank (group rank i holds stage i): one
# 4-stage pipeline over the whole world, or two 2-stage pipelines side by side (two data-parallel
# replicas, each pipelined over 2 ranks), each with its own model and batch.
LAYOUTS = {"world-of-4": ((0, 1, 2, 3),), "pairs-0-2-and-1-3": ((0, 2), (1, 3))}
NUM_LAYERS, M = 8, 4


@pytest.mark.parametrize("layout", LAYOUTS)
def test_run_schedule_on_4_ranks_matches_one_process_in_each_pipeline_group(submission, layout: str):
    pipelines = LAYOUTS[layout]
    args: dict[int, tuple] = {}
    expected: dict[tuple[int, ...], dict[str, torch.Tensor]] = {}
    for ranks in pipelines:
        group = Group(ranks) if len(ranks) < 4 else None  # None: the whole world
        gen = generator("public-pipeline", layout, ranks)
        seed = int(torch.randint(2**31, (), generator=gen))
        inputs = torch.randn(9, 6, generator=gen, dtype=torch.float64)
        targets = torch.randn(9, 6, generator=gen, dtype=torch.float64)
        # The same call on every rank of the pipeline: train_pipeline builds the rank's own stages.
        call = ("one_f_one_b_schedule", (len(ranks), M), "dense", NUM_LAYERS, seed, inputs, targets, group)
        args.update(dict.fromkeys(ranks, call))
        layers = make_layers("dense", NUM_LAYERS, 6, seed, torch.float64)
        pipeline_loss(Chunk(layers)(inputs), targets, 9).backward()
        expected[ranks] = {
            f"layers.{i}.{name}": param.grad
            for i, layer in enumerate(layers)
            for name, param in layer.named_parameters()
        }
    result = submission.function("train_pipeline").spmd(4, [args[rank] for rank in range(4)])
    for ranks in pipelines:
        shown = "group=None, the whole world" if len(ranks) == 4 else f"group={list(ranks)}, beside the other pipeline"
        where = f"1F1B with p={len(ranks)}, m={M} on a world of 4 ({shown})"
        got = {name: grad for rank in ranks for name, grad in result.outputs[rank]["grads"].items()}
        missing, extra = sorted(expected[ranks].keys() - got.keys()), sorted(got.keys() - expected[ranks].keys())
        assert not missing and not extra, (
            f"{where}: no rank of the group returned the gradients of {missing}, and {extra} are not the model's: "
            f"stage i runs on group rank i = dist.get_rank(group), and p = dist.get_world_size(group)"
        )
        for name, want in expected[ranks].items():
            assert_matches(
                got[name],
                want,
                f"{where}: gradient of {name} vs one process on the whole batch (the peers of group rank i are "
                f"the global ranks dist.get_global_rank(group, i ± 1))",
                1e-9,
                1e-12,
            )
