"""Public tests for the collectives module: run them while you work with

    pytest assignments/collectives            (add -s to see what each rank prints)
    pytest assignments/collectives -k allgather --no-timeout   (to use breakpoint() on one rank)

Your functions run in worker processes, one per rank, joined by torch.distributed (gloo). The
hidden suite checks many more cases (world sizes 2-4, every dtype, odd sizes, empty tensors,
process groups that are not the world) and performance; `make grade` gives the score.
"""

from __future__ import annotations

import pytest
import torch

from grader.perf import allreduce_bytes_bound, with_slack
from grader.sandbox import Group
from grader.testing import assert_matches, expect_exception, generator, random_tensor, tolerance


@pytest.mark.parametrize("world_size", [2, 3])
def test_ring_allreduce_sums_in_place(submission, world_size):
    inputs = [
        random_tensor((10, 7), torch.float32, generator("public-ar", world_size, r))
        for r in range(world_size)
    ]
    result = submission.function("ring_allreduce").spmd(world_size, [(t,) for t in inputs], return_args=True)
    expected = torch.stack(inputs).sum(0)
    rtol, atol = tolerance(torch.float32, world_size)
    for rank in range(world_size):
        assert_matches(result.outputs[rank], expected, f"rank {rank}: returned tensor", rtol, atol)
        assert_matches(
            result.args[rank][0], expected, f"rank {rank}: input after the call (sum in place)", rtol, atol
        )


def test_ring_allreduce_handles_sizes_not_divisible_by_the_world_size(submission):
    inputs = [torch.arange(7, dtype=torch.int64) * (r + 1) for r in range(3)]
    result = submission.function("ring_allreduce").spmd(3, [(t,) for t in inputs])
    for rank in range(3):
        assert_matches(result.outputs[rank], torch.arange(7) * 6, f"rank {rank}: 7 elements over 3 ranks")


def test_ring_reduce_scatter_returns_this_ranks_chunk(submission):
    inputs = [torch.arange(10, dtype=torch.float64) + r for r in range(4)]
    result = submission.function("ring_reduce_scatter").spmd(4, [(t,) for t in inputs])
    chunks = torch.stack(inputs).sum(0).tensor_split(4)  # sizes 3, 3, 2, 2
    for rank in range(4):
        assert_matches(result.outputs[rank], chunks[rank], f"rank {rank}: chunk {rank} of the sum")


def test_ring_allgather_concatenates_uneven_shards_in_rank_order(submission):
    full = torch.arange(11, dtype=torch.float32)
    shards = full.tensor_split(3)  # sizes 4, 4, 3
    result = submission.function("ring_allgather").spmd(3, [(s,) for s in shards])
    for rank in range(3):
        assert_matches(result.outputs[rank], full, f"rank {rank}: gathered tensor")


# Two groups of a world of 4, by global rank: group rank i is the i-th (dist.new_group sorts them).
PAIRS = ((0, 2), (1, 3))


def expected_in_group(name: str, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    """What each group rank gets from `name` when the group's ranks hold `inputs`, in group-rank order."""
    if name == "ring_allgather":
        return [torch.cat(inputs)] * len(inputs)
    total = torch.stack(inputs).sum(0)
    return list(total.tensor_split(len(inputs))) if name == "ring_reduce_scatter" else [total] * len(inputs)


@pytest.mark.parametrize("name", ["ring_reduce_scatter", "ring_allgather", "ring_allreduce"])
def test_ring_collectives_inside_two_subgroups_of_a_world_of_4_combine_only_their_members(submission, name: str):
    """Ranks {0, 2} and {1, 3} each run their own ring at the same time, on their own tensors, as
    every dimension of a parallel mesh does: p is the size of `group` and rank r its group rank."""
    gen = generator("public-groups", name)
    sizes = (5, 4) if name == "ring_allgather" else (9, 9)  # 9 elements: chunks of 5 and 4 over p = 2
    inputs = {pair: [random_tensor((n,), torch.float32, gen) for n in sizes] for pair in PAIRS}
    # A rank's group is handed to it as grader.sandbox.Group: in the worker it is the ProcessGroup.
    args = {rank: (inputs[pair][i], Group(pair)) for pair in PAIRS for i, rank in enumerate(pair)}
    result = submission.function(name).spmd(4, [args[rank] for rank in range(4)])
    rtol, atol = tolerance(torch.float32, 2)
    for pair in PAIRS:
        other = PAIRS[1 - PAIRS.index(pair)]
        for group_rank, (rank, want) in enumerate(zip(pair, expected_in_group(name, inputs[pair]))):
            assert_matches(
                result.outputs[rank],
                want,
                f"{name} in the group {list(pair)} of a world of 4 (ranks {list(other)} ran their own meanwhile): "
                f"global rank {rank}, group rank {group_rank}; use only the group's members, p = "
                f"dist.get_world_size(group), the group rank and the neighbours from ring_neighbours(group)",
                rtol,
                atol,
            )


def test_ring_allreduce_sends_at_most_the_bandwidth_bound(submission):
    """Bytes each rank sent, counted by the kernel for its process, on 4 MiB over 4 ranks."""
    inputs = [torch.ones(2**20) for _ in range(4)]
    result = submission.function("ring_allreduce").spmd(4, [(t,) for t in inputs], return_result=False)
    bound = allreduce_bytes_bound(4 * 2**20, 4)
    for rank, sent in enumerate(result.bytes_sent):
        assert sent <= with_slack(bound), f"rank {rank} sent {sent:,} bytes; the bound is {int(bound):,}"


def test_allreduce_time_ring_formula(submission):
    # 2(p-1) alpha + 2(p-1)/p n beta with p=4, n=1e6 bytes, alpha=1 us, beta=1 ns/byte
    assert submission.function("allreduce_time")("ring", 4, 1e6, 1e-6, 1e-9) == pytest.approx(6e-6 + 1.5e-3)


def test_allreduce_time_rejects_an_unknown_algorithm(submission):
    expect_exception("ValueError", lambda: submission.function("allreduce_time")("tree", 4, 1e6, 1e-6, 1e-9))
