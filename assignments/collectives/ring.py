# Your working copy: replace every `raise NotImplementedError` with your implementation.
# (Generated from the course's reference by `python -m grader sync`.)
"""Ring collectives from point-to-point messages (lecture 01-collectives, section 2).

Every function runs on every rank at once (SPMD). Only point-to-point calls are allowed:
dist.send, dist.recv, dist.isend, dist.irecv, dist.batch_isend_irecv. The grader refuses
dist.all_reduce and the other collectives while these functions run.

Every function takes `group` (None: the default group, the whole world) and works among its
ranks only: p is the size of `group` and "rank r" is group rank r (dist.get_rank(group)). In a
3D/4D-parallel run each dimension of the mesh has its own groups (a tensor-parallel group, a
data-parallel group, ...), and the groups of one dimension run their collectives at the same
time, so a ring must never reach outside its group. Point-to-point calls take GLOBAL ranks:
ring_neighbours(group) gives them.

Chunks are always `tensor.flatten().tensor_split(p)`: chunk r is owned by group rank r, and
chunk sizes differ by at most one element (some are empty when the tensor is smaller than p).
"""

from __future__ import annotations

import torch
import torch.distributed as dist


def ring_neighbours(group: dist.ProcessGroup | None = None) -> tuple[int, int, int, int]:
    """(rank, world_size, left, right) of this process in the ring of `group` (None: the world).

    `rank` is this process's group rank and `world_size` the size of the group (p); `left` and
    `right` are the GLOBAL ranks to receive from and send to, as dist.send/recv want.
    """
    rank, world_size = dist.get_rank(group), dist.get_world_size(group)

    def global_rank(group_rank: int) -> int:
        return group_rank if group is None else dist.get_global_rank(group, group_rank)

    return rank, world_size, global_rank((rank - 1) % world_size), global_rank((rank + 1) % world_size)


# (Write any helper functions you need here.)


def ring_reduce_scatter(tensor: torch.Tensor, group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """Return this rank's chunk of the elementwise sum of `tensor` over the ranks of `group`.

    Chunks are `tensor.flatten().tensor_split(p)`; group rank r returns chunk r of the sum
    (a new 1-D tensor, as dist.reduce_scatter_tensor would produce). `tensor` is not modified.
    Every rank passes a tensor of the same shape and dtype. Each rank must send (p-1)/p of the
    tensor's bytes, no more.
    """
    raise NotImplementedError("implement ring_reduce_scatter (lectures/01-collectives.md, section 2)")


def ring_allgather(shard: torch.Tensor, group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """Return the concatenation of every rank's flattened `shard` in `group`, in group-rank
    order (1-D).

    Shards may differ in length by one, as tensor_split makes them, and may be empty; a rank does
    not know the others' lengths in advance. Every shard has the same dtype.
    """
    raise NotImplementedError("implement ring_allgather (lectures/01-collectives.md, section 2)")


def ring_allreduce(tensor: torch.Tensor, group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """Sum `tensor` over the ranks of `group`, in place, with the ring algorithm; return `tensor`.

    Reduce-scatter, then all-gather, over the chunks `tensor.flatten().tensor_split(p)`. Works
    for any shape (contiguous or not), any size (also smaller than p, also empty) and dtype.
    Each rank sends 2(p-1)/p of the tensor's bytes: the lower bound for any allreduce.
    """
    raise NotImplementedError("implement ring_allreduce (lectures/01-collectives.md, section 2)")
