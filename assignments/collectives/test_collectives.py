"""Public tests for the collectives module: run them while you work with

    pytest assignments/collectives            (add -s to see what each rank prints)
    pytest assignments/collectives -k allgather --no-timeout   (to use breakpoint() on one rank)

Your functions run in worker processes, one per rank, joined by torch.distributed (gloo). The
hidden suite checks many more cases (world sizes 2-4, every dtype, odd sizes, empty tensors) and
performance; `make grade` gives the score.
"""

from __future__ import annotations

import pytest
import torch

from grader.perf import allreduce_bytes_bound, with_slack
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
