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

Both checks read one world-of-4 call, run once per submission.
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
