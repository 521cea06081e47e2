"""Hidden suite: DDP, ShardedOptimizer (stages 1 and 2) and fully_shard over a process group
that is not the world. In a world of 4, ranks {1, 3} train one model on one batch while ranks
{0, 2} train another model on another batch, each pair in its own group: in a 3D-parallel run
the data-parallel group is the ranks holding the same model shard, never the whole world.

Both pairs must end where one process on their own whole batch ends (train_single_process in
reference.py). A submission that talks on the world group mixes the two pairs (wrong values)
or waits for ranks that never join (a deadlock); one that takes the global rank for the group
rank shards, broadcasts or reduces to the wrong rank. Bytes per rank are held to what torch's
own DistributedDataParallel, ZeroRedundancyOptimizer and FSDP2 fully_shard send in the same
layout (train_torch_in_group in reference.py), plus the slack of grader/perf.py and a header
per broadcast that ZeroRedundancyOptimizer saves (it broadcasts one bucket per rank, where
ShardedOptimizer's docstring broadcasts each parameter).

All four trainings run in one world-of-4 call, run once per submission for both checks. A second
world of 4 splits into a group of 3 ranks {0, 2, 3} (no power of two: layers padded to a
multiple of 3, owners at group ranks that are not the global ones) and a group of one {1}.
"""

from __future__ import annotations

import pytest

from grader.perf import with_slack
from grader.sandbox import Group, Step
from grader.suites.zero.reference import in_float64, make_data, make_state, rank_slice, train_single_process
from grader.suites.zero.test_zero_fsdp import rebuild
from grader.testing import assert_matches

TOL = (1e-5, 1e-6)
CAP_MB = 0.0015  # three buckets for the plain MLP's six parameters, as in test_zero_ddp.py
LR = 0.01
GROUPS = ((1, 3), (0, 2))  # each pair's global ranks; group rank i is the i-th
TRAININGS = ("DDP (AdamW)", "ShardedOptimizer stage 1 (AdamW)", "ShardedOptimizer stage 2 (AdamW)", "fully_shard (SGD)")

# ShardedOptimizer broadcasts the plain MLP's 6 parameters per step where ZeroRedundancyOptimizer
# broadcasts 2 buckets (one per rank), in 5 steps of 2 trainings: 40 more messages, each with
# gloo's header (about 140 bytes measured; a DDP all-reducing twice adds 30 kB).
EXTRA_BROADCASTS, HEADER_BYTES = (6 - 2) * 5 * 2, 256
RUNS: dict[int, tuple] = {}


def pair_data(ranks: tuple[int, ...]):
    """This group's starting state, batches (ROWS_PER_RANK rows per member) and single-process
    results, in TRAININGS order."""
    state, inputs, targets = in_float64(make_state("plain", "groups", ranks), *make_data(len(ranks), "groups", ranks))
    expected = [train_single_process("plain", state, "adamw", LR, inputs, targets)] * 3
    expected.append(train_single_process("plain", state, "sgd", LR, inputs, targets))
    return state, inputs, targets, expected


def arguments(ranks: tuple[int, ...], group_rank: int, state, inputs, targets) -> tuple:
    """The train_torch_in_group arguments of one rank: the group's rank 1 starts DDP from another
    state (DDP's construction must broadcast from the group's rank 0)."""
    start = state if group_rank == 0 else {k: v + 0.5 for k, v in state.items()}
    x, y = rank_slice(inputs, group_rank), rank_slice(targets, group_rank)
    return start, state, x, y, LR, CAP_MB, Group(ranks)


def the_four_trainings(groups: tuple[tuple[int, ...], ...]):
    """Per global rank of a world of 4 split into `groups`: the four trainings' steps, torch's
    arguments, and each group's expected results."""
    steps, torch_args, expected = [None] * 4, [None] * 4, {}
    for ranks in groups:
        state, inputs, targets, expected[ranks] = pair_data(ranks)
        for group_rank, rank in enumerate(ranks):
            start, state, x, y, lr, cap, group = torch_args[rank] = arguments(ranks, group_rank, state, inputs, targets)
            steps[rank] = [
                Step("train_ddp", ("plain", start, "adamw", lr, x, y, cap, group)),
                Step("train_sharded", (state, "adamw", 1, lr, x, y, group)),
                Step("train_sharded", (state, "adamw", 2, lr, x, y, group)),
                Step("train_fsdp", ("plain", state, "sgd", lr, x, y, None, group)),
            ]
    return steps, torch_args, expected


def run_in_groups(submission, library):
    """Per global rank, the submission's four results and the call's bytes; the same for torch."""
    if id(submission) in RUNS:
        return RUNS[id(submission)]
    steps, torch_args, expected = the_four_trainings(GROUPS)
    got = submission.script_spmd(4, steps)
    torch_run = library.spmd("grader.suites.zero.reference:train_torch_in_group", 4, torch_args)
    RUNS[id(submission)] = got, torch_run, expected
    return RUNS[id(submission)]


def check_groups(got, expected: dict, groups: tuple[tuple[int, ...], ...]) -> None:
    """Every member of every group ends where one process on the group's whole batch ends."""
    for ranks in groups:
        for index, training in enumerate(TRAININGS):
            others = " and ".join(str(list(g)) for g in groups if g != ranks)
            where = f"{training} over group {list(ranks)} of a world of 4 (ranks {others} ran another group meanwhile)"
            if index == 3:
                results = [got.steps[rank][index] for rank in ranks]
                finals = [rebuild(results, "shards", "plain", where)]
            else:
                finals = [got.steps[rank][index]["state"] for rank in ranks]
            for group_rank, final in enumerate(finals):
                for name, want in expected[ranks][index].items():
                    assert_matches(
                        final[name],
                        want,
                        f"{where}: group rank {group_rank}'s {name} after 5 steps (one process on the group's "
                        f"whole batch gives the expected value; p is the size of `group`, ranks are group ranks: "
                        f"dist.get_rank(group), group=group on every collective)",
                        *TOL,
                    )


@pytest.mark.points(4)
def test_data_parallel_in_two_groups_of_a_world_of_4_trains_each_like_one_process(submission, library):
    got, _, expected = run_in_groups(submission, library)
    check_groups(got, expected, GROUPS)


# A group of 3 (no power of two: a layer of 272 parameters pads to 273, stage 2's owners are
# group ranks 0, 1, 2 = global ranks 0, 2, 3) beside a group of one (p = 1: nothing to average)
UNEVEN_GROUPS = ((0, 2, 3), (1,))


@pytest.mark.points(3)
def test_data_parallel_in_a_group_of_3_and_a_group_of_1_trains_each_like_one_process(submission):
    steps, _, expected = the_four_trainings(UNEVEN_GROUPS)
    check_groups(submission.script_spmd(4, steps), expected, UNEVEN_GROUPS)


@pytest.mark.perf
@pytest.mark.points(2)
def test_data_parallel_in_two_groups_sends_no_more_than_torch(submission, library, device, record_property):
    got, torch_run, _ = run_in_groups(submission, library)
    if not any(got.bytes_sent) and device == "cuda":
        pytest.skip("no bytes were counted: NCCL moves data where the kernel does not count it")
    record_property("bytes_sent_per_rank", got.bytes_sent)
    record_property("torch_bytes_sent_per_rank", torch_run.bytes_sent)
    for rank, (sent, torch_sent) in enumerate(zip(got.bytes_sent, torch_run.bytes_sent)):
        allowed = with_slack(torch_sent + EXTRA_BROADCASTS * HEADER_BYTES)
        assert sent <= allowed, (
            f"rank {rank} sent {sent:,} bytes in the four trainings over its group; torch's DDP, "
            f"ZeroRedundancyOptimizer and FSDP2 in the same layout send {torch_sent:,} (+ slack and "
            f"{EXTRA_BROADCASTS} broadcasts' headers: {int(allowed):,}): talk only within `group`, once per "
            f"bucket, parameter and layer"
        )
