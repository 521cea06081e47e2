"""Hidden suite: ring collectives against torch.distributed (gloo here, NCCL on GPUs).

References come from trusted workers that never import the submission: dist.all_reduce,
dist.reduce_scatter_tensor and dist.all_gather_into_tensor (see grader/library.py for how
uneven sizes are handled). World sizes 2, 3 and 4; sizes divisible by the world size and not,
smaller than it, and empty; float32, float64, bfloat16 and int64; multi-dimensional and
non-contiguous inputs. Inputs are random per run.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

from grader.testing import assert_matches, generator, random_tensor, tolerance

WORLD_SIZES = (2, 3, 4)


@dataclass(frozen=True)
class Case:
    name: str
    shape: tuple[int, ...]  # a shape, or (rows, cols) transposed when `transposed`
    dtype: torch.dtype
    transposed: bool = False

    def tensor(self, *salt: object) -> torch.Tensor:
        t = random_tensor(self.shape, self.dtype, generator(self.name, *salt))
        return t.t() if self.transposed else t


CASES = [
    Case("divisible-float32", (24,), torch.float32),
    Case("not-divisible-float64", (1001,), torch.float64),
    Case("smaller-than-world-float32", (1,), torch.float32),
    Case("empty-float32", (0,), torch.float32),
    Case("multi-dim-bfloat16", (3, 5, 7), torch.bfloat16),
    Case("non-contiguous-int64", (6, 9), torch.int64, transposed=True),
    Case("not-divisible-int64", (1000003,), torch.int64),
    Case("large-float32", (257, 129), torch.float32),
]


def _grid() -> list:
    return [pytest.param(p, case, id=f"world={p}-{case.name}") for p in WORLD_SIZES for case in CASES]


@pytest.mark.parametrize(("world_size", "case"), _grid())
def test_ring_allreduce_matches_all_reduce(submission, library, world_size, case):
    """ring_allreduce sums in place, like dist.all_reduce, and every rank ends bit-identical."""
    inputs = [case.tensor("allreduce", world_size, r) for r in range(world_size)]
    result = submission.function("ring_allreduce").spmd(world_size, [(t,) for t in inputs], return_args=True)
    reference = library.spmd("grader.library:all_reduce", world_size, [(t,) for t in inputs])
    rtol, atol = tolerance(case.dtype, world_size)
    for rank in range(world_size):
        expected = reference.outputs[rank]
        assert_matches(result.outputs[rank], expected, f"rank {rank}: returned tensor vs dist.all_reduce", rtol, atol)
        assert_matches(
            result.args[rank][0],
            expected,
            f"rank {rank}: the input tensor after the call (ring_allreduce works in place)",
            rtol,
            atol,
        )
        assert_matches(
            result.outputs[rank],
            result.outputs[0],
            f"rank {rank} vs rank 0: every rank must end with the same bits",
        )


@pytest.mark.parametrize(("world_size", "case"), _grid())
def test_ring_reduce_scatter_matches_reduce_scatter_tensor(submission, library, world_size, case):
    """Rank r gets chunk r of the sum (chunks by tensor_split), as dist.reduce_scatter_tensor."""
    inputs = [case.tensor("reduce_scatter", world_size, r) for r in range(world_size)]
    result = submission.function("ring_reduce_scatter").spmd(world_size, [(t,) for t in inputs], return_args=True)
    reference = library.spmd("grader.library:reduce_scatter", world_size, [(t,) for t in inputs])
    rtol, atol = tolerance(case.dtype, world_size)
    for rank in range(world_size):
        assert_matches(
            result.outputs[rank],
            reference.outputs[rank],
            f"rank {rank}: chunk {rank} of the sum vs dist.reduce_scatter_tensor",
            rtol,
            atol,
        )
        assert_matches(result.args[rank][0], inputs[rank], f"rank {rank}: the input must not be modified")


@pytest.mark.parametrize(("world_size", "case"), _grid())
def test_ring_allgather_matches_all_gather_into_tensor(submission, library, world_size, case):
    """Shards of uneven length (as tensor_split makes them) come back concatenated in rank order."""
    full = case.tensor("allgather", world_size).flatten()
    shards = list(full.tensor_split(world_size))
    sizes = [s.numel() for s in shards]
    result = submission.function("ring_allgather").spmd(world_size, [(s,) for s in shards])
    reference = library.spmd("grader.library:all_gather", world_size, [(s, sizes) for s in shards])
    for rank in range(world_size):
        assert_matches(reference.outputs[rank], full, "the library reference (grader bug if this fails)")
        assert_matches(
            result.outputs[rank],
            reference.outputs[rank],
            f"rank {rank}: gathered tensor vs dist.all_gather_into_tensor",
        )
