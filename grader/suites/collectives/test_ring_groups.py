"""Hidden suite: the ring collectives in a process group that is not the world. In a world of 4,
ranks {1, 3} run ring_allreduce, ring_reduce_scatter and ring_allgather in one group while ranks
{0, 2} run them in another, at once, on other tensors (each dimension of a parallel mesh has
its own groups, and the groups of one dimension communicate at the same time).

Each group's results must be the sums and concatenations over its own two ranks, in group-rank
order (torch.distributed's semantics for group=..., computed here from the inputs). A ring that
talks on the world, takes the global rank for the group rank, or sends to a group rank as if it
were global reaches into the other group, deadlocks or fails. Bytes per rank, counted by the
kernel, are held to the bandwidth bounds of the group's size p = 2 (lecture 01, section 3), plus
the slack of grader/perf.py (it covers the few hundred bytes of building the groups).

Both checks read one world-of-4 call, run once per submission. Below them: a world of 5 cut into
groups of 3 and 2 ({0, 2, 3} and {1, 4}: neither contiguous nor strided), and a world of 1.
"""

from __future__ import annotations

import pytest
import torch

from grader.perf import allreduce_bytes_bound, with_slack
from grader.sandbox import Group, Step
from grader.testing import assert_matches, generator, tolerance

NUMEL = 2**18  # 1 MiB of float32 per tensor
GROUPS = ((1, 3), (0, 2))  # global ranks; group rank i is the i-th
SHARDS = (NUMEL // 2 + 1, NUMEL // 2)  # ring_allgather's shard lengths by group rank: uneven

RUNS: dict[int, object] = {}


def group_inputs(ranks: tuple[int, ...]) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """Per group rank: the allreduce tensor, the reduce-scatter tensor and the allgather shard."""
    gen = generator("ring-groups", ranks)
    return [
        (torch.randn(NUMEL, generator=gen), torch.randn(NUMEL, generator=gen), torch.randn(n, generator=gen))
        for n in SHARDS
    ]


def run_in_groups(submission):
    if id(submission) not in RUNS:
        steps = [None] * 4
        for ranks in GROUPS:
            for rank, (a, b, shard) in zip(ranks, group_inputs(ranks)):
                group = Group(ranks)
                steps[rank] = [
                    Step("ring_allreduce", (a, group)),
                    Step("ring_reduce_scatter", (b, group)),
                    Step("ring_allgather", (shard, group)),
                ]
        RUNS[id(submission)] = submission.script_spmd(4, steps)
    return RUNS[id(submission)]


@pytest.mark.points(3)
def test_ring_collectives_in_two_groups_of_a_world_of_4_reduce_within_their_group(submission):
    result = run_in_groups(submission)
    rtol, atol = tolerance(torch.float32, 2)
    for ranks in GROUPS:
        inputs = group_inputs(ranks)
        other = GROUPS[1 - GROUPS.index(ranks)]
        where = f"in the group {list(ranks)} of a world of 4 (ranks {list(other)} ran another group meanwhile)"
        total = inputs[0][0] + inputs[1][0]
        chunks = (inputs[0][1] + inputs[1][1]).tensor_split(2)
        gathered = torch.cat([inputs[0][2], inputs[1][2]])
        for group_rank, rank in enumerate(ranks):
            allreduced, scattered, allgathered = result.steps[rank]
            assert_matches(allreduced, total, f"ring_allreduce {where}: group rank {group_rank}'s sum", rtol, atol)
            assert_matches(
                scattered,
                chunks[group_rank],
                f"ring_reduce_scatter {where}: group rank {group_rank}'s chunk (chunk r of the group's sum for "
                f"group rank r = dist.get_rank(group); ring_neighbours(group) gives it)",
                rtol,
                atol,
            )
            assert_matches(
                allgathered,
                gathered,
                f"ring_allgather {where}: group rank {group_rank}'s concatenation, in group-rank order",
                0,
                0,
            )


@pytest.mark.perf
@pytest.mark.points(2)
def test_ring_collectives_in_groups_send_no_more_than_the_bounds_for_the_groups_size(
    submission, device, record_property
):
    result = run_in_groups(submission)
    if not any(result.bytes_sent) and device == "cuda":
        pytest.skip("no bytes were counted: NCCL moves data over NVLink/PCIe, where the kernel does not count it")
    nbytes = NUMEL * 4
    # p = 2: the allreduce sends half of each of its 2 phases, the reduce-scatter half once, the
    # allgather its own shard and its int64 length
    bounds = [0] * 4
    for ranks in GROUPS:
        for group_rank, rank in enumerate(ranks):
            bounds[rank] = allreduce_bytes_bound(nbytes, 2) * 1.5 + SHARDS[group_rank] * 4 + 8
    record_property("bytes_sent_per_rank", result.bytes_sent)
    record_property("bytes_bound_per_rank", bounds)
    for rank, (sent, bound) in enumerate(zip(result.bytes_sent, bounds)):
        assert sent <= with_slack(bound), (
            f"rank {rank} sent {sent:,} bytes in its group's three ring collectives; the bounds for a group of "
            f"p = 2 come to {int(bound):,} (+ slack: {int(with_slack(bound)):,}): p is the size of `group`, "
            f"send each chunk once per phase, to the ring neighbour in the group only"
        )


# ------------------------------------------------------------------ groups of different sizes

# A world of 5 cut into a group of 3 and a group of 2 that run at once. Neither group is ranks
# 0..p-1, a contiguous block or evenly strided: a group rank taken as global // p, global % p or
# global * p // world, or a neighbour taken as global +- world // p, is wrong in one of them
# (the world-of-4 layout above, {1, 3} and {0, 2}, is strided: global // 2 gives its group ranks).
UNEVEN_WORLD = 5
UNEVEN_GROUPS = ((0, 2, 3), (1, 4))  # global ranks; group rank i is the i-th
UNEVEN_SHAPE = (10, 7)  # 70 elements: chunks of 24, 23, 23 over 3 ranks, 35 and 35 over 2
UNEVEN_SHARDS = {3: 7, 2: 1}  # ring_allgather: tensor_split of 7 (3, 2, 2) and of 1 (1 and an empty shard)
UNEVEN_RUNS: dict[int, object] = {}


def uneven_group_inputs(ranks: tuple[int, ...]) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """Per group rank: the allreduce tensor (float64), the reduce-scatter tensor (float32) and
    the allgather shard (int64), all 2-D except the shards."""
    gen = generator("ring-uneven-groups", ranks)
    p = len(ranks)
    shards = torch.randint(-1000, 1001, (UNEVEN_SHARDS[p],), generator=gen).tensor_split(p)
    return [
        (
            torch.randn(UNEVEN_SHAPE, generator=gen, dtype=torch.float64),
            torch.randn(UNEVEN_SHAPE, generator=gen),
            shard.clone(),
        )
        for shard in shards
    ]


def run_in_uneven_groups(submission):
    if id(submission) not in UNEVEN_RUNS:
        steps = [None] * UNEVEN_WORLD
        for ranks in UNEVEN_GROUPS:
            for rank, (a, b, shard) in zip(ranks, uneven_group_inputs(ranks)):
                group = Group(ranks)
                steps[rank] = [
                    Step("ring_allreduce", (a, group)),
                    Step("ring_reduce_scatter", (b, group)),
                    Step("ring_allgather", (shard, group)),
                ]
        UNEVEN_RUNS[id(submission)] = submission.script_spmd(UNEVEN_WORLD, steps)
    return UNEVEN_RUNS[id(submission)]


@pytest.mark.points(2)
def test_ring_collectives_in_groups_of_3_and_2_of_a_world_of_5_reduce_within_their_group(submission):
    """Groups {0, 2, 3} and {1, 4} at once: sizes not divisible by the group's size, a group of
    odd size (left and right neighbours differ), an empty allgather shard."""
    result = run_in_uneven_groups(submission)
    for ranks in UNEVEN_GROUPS:
        p, inputs = len(ranks), uneven_group_inputs(ranks)
        other = UNEVEN_GROUPS[1 - UNEVEN_GROUPS.index(ranks)]
        where = f"in the group {list(ranks)} of a world of 5 (ranks {list(other)} ran another group meanwhile)"
        total = sum(a for a, _, _ in inputs)
        chunks = sum(b for _, b, _ in inputs).flatten().tensor_split(p)
        gathered = torch.cat([shard for _, _, shard in inputs])
        for group_rank, rank in enumerate(ranks):
            allreduced, scattered, allgathered = result.steps[rank]
            assert_matches(
                allreduced,
                total,
                f"ring_allreduce {where}: global rank {rank} (group rank {group_rank})'s sum of the group's "
                f"{p} tensors of shape {UNEVEN_SHAPE}",
                *tolerance(torch.float64, p),
            )
            assert_matches(
                scattered,
                chunks[group_rank],
                f"ring_reduce_scatter {where}: global rank {rank} returns chunk {group_rank} of {p} (of "
                f"{[c.numel() for c in chunks]} elements): group rank r = dist.get_rank(group) is the rank's "
                f"position among the group's sorted global ranks, whatever the layout",
                *tolerance(torch.float32, p),
            )
            assert_matches(
                allgathered,
                gathered,
                f"ring_allgather {where}: global rank {rank}'s concatenation of shards of "
                f"{[s.numel() for _, _, s in inputs]} elements, in group-rank order",
                0,
                0,
            )


@pytest.mark.points(1)
def test_ring_collectives_on_a_world_of_one_rank_return_the_sum_over_one_rank(submission):
    """p = 1 (group None, a world of 1): the sum over one rank is the input, its only chunk is the
    whole tensor, the concatenation is the shard; nothing is sent (there is no other rank)."""
    gen = generator("ring-world-of-1")
    a = torch.randn(4, 6, generator=gen, dtype=torch.float64).t()  # not contiguous
    b, shard = torch.randn(5, generator=gen), torch.randint(-9, 10, (3, 2), generator=gen)
    steps = [Step("ring_allreduce", (a,)), Step("ring_reduce_scatter", (b,)), Step("ring_allgather", (shard,))]
    allreduced, scattered, allgathered = submission.script_spmd(1, [steps]).steps[0]
    assert_matches(allreduced, a, "ring_allreduce on a world of 1 rank (a (6, 4) non-contiguous tensor)", 0, 0)
    assert_matches(scattered, b, "ring_reduce_scatter on a world of 1 rank: its chunk is the whole (flat) tensor", 0, 0)
    assert_matches(allgathered, shard.flatten(), "ring_allgather on a world of 1 rank: the flattened shard", 0, 0)
