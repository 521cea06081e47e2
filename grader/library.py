"""Reference operations run by the real library, in trusted workers that never import a
submission (see grader.sandbox.Library). Each is the torch.distributed call an exercise mirrors."""

from __future__ import annotations

import torch
import torch.distributed as dist


def all_reduce(tensor: torch.Tensor) -> torch.Tensor:
    """torch.distributed.all_reduce (sum), in place, as ring_allreduce must behave."""
    dist.all_reduce(tensor)
    return tensor


def reduce_scatter(tensor: torch.Tensor) -> torch.Tensor:
    """This rank's chunk of the sum over ranks, chunks as `tensor.flatten().tensor_split(p)`.

    torch.distributed.reduce_scatter_tensor needs equal chunks; when the size does not divide
    evenly the reference is torch.distributed.all_reduce followed by tensor_split.
    """
    p, rank = dist.get_world_size(), dist.get_rank()
    flat = tensor.flatten().contiguous()
    if flat.numel() % p == 0:
        out = torch.empty(flat.numel() // p, dtype=flat.dtype, device=flat.device)
        dist.reduce_scatter_tensor(out, flat)
        return out
    dist.all_reduce(flat)
    return flat.tensor_split(p)[rank].clone()


def all_gather(shard: torch.Tensor, sizes: list[int]) -> torch.Tensor:
    """Every rank's flattened shard, concatenated in rank order.

    torch.distributed.all_gather_into_tensor needs equal shards, so uneven shards (`sizes` per
    rank, as tensor_split makes them) are padded to the largest and trimmed after.
    """
    p, largest = dist.get_world_size(), max(sizes)
    padded = torch.zeros(largest, dtype=shard.dtype, device=shard.device)
    padded[: shard.numel()] = shard.flatten()
    out = torch.empty(p * largest, dtype=shard.dtype, device=shard.device)
    dist.all_gather_into_tensor(out, padded)
    return torch.cat([out[r * largest : r * largest + sizes[r]] for r in range(p)])


def all_to_all_single(tensor: torch.Tensor) -> torch.Tensor:
    """torch.distributed.all_to_all_single with equal splits: block i of the result is block
    `rank` of rank i's flattened input (the schedules of module cluster must deliver the same)."""
    out = torch.empty_like(tensor.flatten())
    dist.all_to_all_single(out, tensor.flatten().contiguous())
    return out.view_as(tensor)


def device_mesh_groups(mesh_shape: list[int], names: list[str], flattened: list[list[str]]) -> dict[str, list[int]]:
    """The global ranks of this rank's group along every dimension of
    torch.distributed.device_mesh.init_device_mesh("cpu", mesh_shape, mesh_dim_names=names), and
    along each list of dimensions in `flattened` (DeviceMesh._flatten, keyed "dp-cp")."""
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh("cpu", tuple(mesh_shape), mesh_dim_names=tuple(names))
    groups = {name: dist.get_process_group_ranks(mesh.get_group(name)) for name in names}
    for dims in flattened:
        flat = mesh[tuple(dims)]._flatten("_".join(dims))
        groups["-".join(dims)] = dist.get_process_group_ranks(flat.get_group())
    return groups


def process_grid_groups(sizes: dict[str, int], order: str, dimensions: list[str]) -> dict[str, list[int]]:
    """The global ranks of this rank's ProcessGrid.group(d) for each d of `dimensions`, built in
    that order on every rank (grader/models/process_grid.py)."""
    from grader.models.process_grid import ProcessGrid

    grid = ProcessGrid(**sizes, order=order)
    return {d: dist.get_process_group_ranks(grid.group(d)) for d in dimensions}


def dcp_save_sharded(full: dict[str, torch.Tensor], path: str) -> None:
    """torch.distributed.checkpoint.save of `full`'s tensors as DTensors sharded on dim 0 over the
    world (Shard(0), fully_shard's layout): each rank writes its own rows."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.tensor import Shard, distribute_tensor, init_device_mesh

    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    dcp.save({name: distribute_tensor(t, mesh, [Shard(0)]) for name, t in full.items()}, checkpoint_id=path)


def dcp_load_sharded(shapes: dict[str, tuple[tuple[int, ...], torch.dtype]], path: str) -> dict[str, torch.Tensor]:
    """torch.distributed.checkpoint.load into DTensors sharded on dim 0 over the world: each
    rank's local rows of every tensor (`shapes`: name -> (full shape, dtype)), resharded by DCP."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.tensor import Shard, distribute_tensor, init_device_mesh

    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    state = {
        name: distribute_tensor(torch.zeros(shape, dtype=dtype), mesh, [Shard(0)])
        for name, (shape, dtype) in shapes.items()
    }
    dcp.load(state, checkpoint_id=path)
    return {name: t.to_local().clone() for name, t in state.items()}


def dcp_blocking_save(full: dict[str, torch.Tensor], path: str, steps: int, save_at: int) -> float:
    """The seconds torch.distributed.checkpoint.save (synchronous) holds a training loop like
    reliability's train_and_checkpoint: `steps` steps of the same compute, each adding 1 in place
    to this rank's rows (Shard(0) DTensors over the world), a save after step `save_at`; the
    longest hold over the ranks."""
    import time

    import torch.distributed.checkpoint as dcp
    from torch.distributed.tensor import Shard, distribute_tensor, init_device_mesh

    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    state = {name: distribute_tensor(t, mesh, [Shard(0)]) for name, t in full.items()}
    blocked, work = 0.0, torch.ones(128, 128)
    for step in range(steps):
        work = torch.tanh(work @ work / 128)
        for tensor in state.values():
            tensor.to_local().add_(1.0)
        if step == save_at:
            start = time.perf_counter()
            dcp.save(state, checkpoint_id=path)
            blocked = time.perf_counter() - start
    longest = torch.tensor(blocked)
    dist.all_reduce(longest, op=dist.ReduceOp.MAX)
    return longest.item()
