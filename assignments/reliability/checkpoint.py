# Your working copy: replace every `raise NotImplementedError` with your implementation.
# (Generated from the course's reference by `python -m grader sync`.)
"""Checkpoints that reshard, and checkpoints that do not stop training (lecture 14-reliability,
sections 4 and 5).

The layout is torch.distributed.checkpoint's (DCP) own, so DCP reads what these functions write
and they read what DCP writes:

    path/__0_0.distcp   rank 0's shards: one torch.save blob per tensor, back to back
    path/__1_0.distcp   rank 1's shards
    ...
    path/.metadata      written last, by rank 0: every tensor's full shape and dtype, and for
                        each chunk its rows, its file, and where its blob starts and how long it is

Crash consistency: a folder is a checkpoint only while it holds `.metadata`, and `.metadata`
names only complete, fsynced shard files. A save that does not finish (a rank killed, or raising,
before commit returns) therefore never leaves a checkpoint that looks complete: in a fresh
folder there is no `.metadata` yet, and in a folder that held an earlier checkpoint, write_shard
removed the old `.metadata` before it overwrote any shard file. Checkpoints in other folders are
never touched, so training resumes from the last one that was complete.

A state is sharded the way fully_shard (FSDP2) shards parameters, on dim 0: rank r of p holds the
rows shard_rows(R, p, r) of a tensor of R rows, blocks of ceil(R / p) rows, so the last ranks may
hold fewer rows, or none. Resharding is then arithmetic on row ranges: rank r of the new world
reads exactly the chunks that overlap its new rows.
"""

from __future__ import annotations

import io
import os
import pickle
import threading
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint.filesystem import _StorageInfo  # DCP's record of where a blob lies
from torch.distributed.checkpoint.metadata import (
    ChunkStorageMetadata,
    Metadata,
    MetadataIndex,
    TensorProperties,
    TensorStorageMetadata,
)

METADATA = ".metadata"
State = dict[str, torch.Tensor]
Group = dist.ProcessGroup | None


def shard_rows(rows: int, world_size: int, rank: int) -> tuple[int, int]:
    """The rows [start, stop) of a tensor of `rows` rows that rank `rank` of `world_size` holds:
    blocks of ceil(rows / world_size), as torch.chunk and fully_shard cut them."""
    block = -(-rows // world_size)
    start = min(rank * block, rows)
    return start, min(start + block, rows)


def rank_and_size(group: Group = None) -> tuple[int, int]:
    """This process's rank in `group` and the group's size; (0, 1) without torch.distributed."""
    if not dist.is_initialized():
        return 0, 1
    return dist.get_rank(group), dist.get_world_size(group)


def write_metadata(path: str | os.PathLike, tensors: dict[str, dict[str, Any]]) -> None:
    """Write DCP's `.metadata` for `tensors`, each {"shape", "dtype", "chunks"} with chunks
    [{"rows": (start, stop), "file", "byte_offset", "byte_length"}], atomically: a reader sees
    the whole file or none (written aside, then renamed)."""
    state_dict_metadata, storage_data = {}, {}
    for name, tensor in tensors.items():
        shape = torch.Size(tensor["shape"])
        chunks = []
        for chunk in tensor["chunks"]:
            start, stop = chunk["rows"]
            offsets = torch.Size([start] + [0] * (len(shape) - 1))
            chunks.append(ChunkStorageMetadata(offsets=offsets, sizes=torch.Size([stop - start, *shape[1:]])))
            storage_data[MetadataIndex(name, offsets)] = _StorageInfo(
                chunk["file"], chunk["byte_offset"], chunk["byte_length"]
            )
        state_dict_metadata[name] = TensorStorageMetadata(TensorProperties(dtype=tensor["dtype"]), shape, chunks)
    aside = Path(path) / f"{METADATA}.partial"
    aside.write_bytes(pickle.dumps(Metadata(state_dict_metadata=state_dict_metadata, storage_data=storage_data)))
    os.replace(aside, Path(path) / METADATA)


def read_metadata(path: str | os.PathLike) -> dict[str, dict[str, Any]]:
    """DCP's `.metadata` in `path` as write_metadata takes it. Raises FileNotFoundError without
    one (not a checkpoint, or a save that did not finish: the metadata is written last), and
    ValueError for an entry this course's layout cannot hold (not a tensor of >= 1 dim, a chunk
    cut along another dim than 0, a compressed blob)."""
    if not (Path(path) / METADATA).is_file():
        raise FileNotFoundError(f"{path} holds no {METADATA}: not a checkpoint, or one whose save did not finish")
    metadata = FileSystemReader(os.fspath(path)).read_metadata()
    tensors = {}
    for name, entry in metadata.state_dict_metadata.items():
        if not isinstance(entry, TensorStorageMetadata) or len(entry.size) == 0:
            raise ValueError(f"checkpoint entry {name!r} is not a tensor of >= 1 dim")
        chunks = []
        for chunk in entry.chunks:
            if any(chunk.offsets[1:]) or tuple(chunk.sizes[1:]) != tuple(entry.size[1:]):
                raise ValueError(f"checkpoint entry {name!r} is cut along another dim than 0")
            info = metadata.storage_data[MetadataIndex(name, chunk.offsets)]
            if getattr(info, "transform_descriptors", None):
                raise ValueError(f"checkpoint entry {name!r} is stored transformed ({info.transform_descriptors})")
            rows = (chunk.offsets[0], chunk.offsets[0] + chunk.sizes[0])
            where = {"file": info.relative_path, "byte_offset": info.offset, "byte_length": info.length}
            chunks.append({"rows": rows, **where})
        tensors[name] = {"shape": tuple(entry.size), "dtype": entry.properties.dtype, "chunks": chunks}
    return tensors


def write_shard(state: State, path: str | os.PathLike, rank: int) -> dict[str, dict[str, Any]]:
    """Write this rank's shards to `path/__{rank}_0.distcp` (creating `path` if needed): for each
    name of `state` in sorted order, its tensor as one torch.save blob, right after the previous
    one; a tensor of 0 rows writes no blob. The file holds only this rank's rows: torch.save of a
    view writes the whole storage behind it, so save a copy of just the shard. Before returning,
    flush the file and os.fsync it, as DCP's FileSystemWriter does (sync_files=True): until then
    its bytes may be only in the page cache, and a crash of the node would lose them.

    If `path` already holds a `.metadata` (a checkpoint saved there before), remove it before
    writing any byte: from then on the folder holds no checkpoint until commit writes the new
    `.metadata`, so a save killed part-way never leaves the old metadata naming shard files
    that are half overwritten (the module docstring: crash consistency).

    Returns, per name, {"rows": its number of rows, "trailing": its shape after dim 0 (a tuple),
    "dtype", "file": the file's name (not the path), "byte_offset": where its blob starts,
    "byte_length": the blob's length} (0 and 0 for a tensor of 0 rows).
    Raises ValueError if `state` is empty or a value is not a tensor of >= 1 dim.
    """
    raise NotImplementedError("implement write_shard (lectures/14-reliability.md, section 4)")


def commit(records: dict[str, dict[str, Any]], path: str | os.PathLike, group: Group = None) -> None:
    """Finish a checkpoint that every rank of `group` has written with write_shard: gather every
    rank's records, check them, and have rank 0 of the group write `.metadata` (write_metadata).
    Returns on every rank only once the metadata is written (a barrier), so a checkpoint is
    complete when commit returns anywhere: when rank 0 fails to write it, commit returns on no
    rank. Without torch.distributed, a world of one.

    A tensor's full shape is (R, *trailing) where R is the sum of the ranks' rows; its chunks are
    the ranks' non-empty shards in rank order. Raises ValueError, on every rank, when the ranks
    do not hold the same names, or a name's trailing shape or dtype differs between ranks, or a
    rank's rows are not shard_rows(R, p, rank) of the full tensor.
    """
    raise NotImplementedError("implement commit (lectures/14-reliability.md, section 4)")


def save_sharded(state: State, path: str | os.PathLike, group: Group = None) -> None:
    """Save a sharded state: each rank of `group` passes its own shards (rows shard_rows(R, p,
    rank) of each tensor, p the group's size, rank its rank in the group) and writes only them
    (write_shard with that rank in the group, not the global rank: files __0_0.distcp ..
    __{p-1}_0.distcp), then commit. Every rank passes the same names, trailing shapes and dtypes.
    Returns when the checkpoint is complete on every rank. Raises ValueError where write_shard
    or commit does.
    """
    raise NotImplementedError("implement save_sharded (lectures/14-reliability.md, section 4)")


def load_resharded(state: State, path: str | os.PathLike, group: Group = None) -> State:
    """Fill `state` in place from the checkpoint in `path`, whatever the number of ranks that
    wrote it (like torch.distributed.checkpoint.load), and return it.

    state[name] is this rank's shard in the new layout: for the checkpoint's full shape (R, ...),
    the rows shard_rows(R, p, rank) of the group. Each rank reads only the blobs of the chunks
    that overlap its rows (read_metadata says where they lie: seek, read byte_length bytes,
    torch.load them with weights_only=True), and copies the overlapping rows in. It works the
    same on a checkpoint that DCP's save wrote from tensors sharded on dim 0. Names in the
    checkpoint but not in `state` are not read. No communication.

    Raises FileNotFoundError when `path` holds no `.metadata`. Raises ValueError, naming the
    tensor, the full shape and the shape expected on this rank, when a name of `state` is not in
    the checkpoint, when its tensor has not the shard's shape, or when it has not the
    checkpoint's dtype.
    """
    raise NotImplementedError("implement load_resharded (lectures/14-reliability.md, section 4)")


class AsyncCheckpointer:
    """Checkpoints that do not stop training, as torch.distributed.checkpoint.async_save does.

    save(state, path, group=None) first waits for the previous save, if any (wait()), then
    copies every tensor of `state` into memory of its own (the snapshot: in-place updates of
    `state` after save returns never reach the checkpoint), starts one background thread that
    writes the snapshot with write_shard, and returns without waiting for the write.
    wait() joins that thread and commits the checkpoint (commit: gather, `.metadata`, barrier):
    the checkpoint is complete only once wait() has returned. An exception in the writing
    thread is not lost: wait() propagates it. wait() does nothing when no save is pending.
    Every rank of the group calls save and wait in the same order, because wait communicates.
    """

    def __init__(self) -> None:
        raise NotImplementedError("implement AsyncCheckpointer.__init__ (lectures/14-reliability.md, section 5)")

    def save(self, state: State, path: str | os.PathLike, group: Group = None) -> None:
        """Snapshot `state` into memory and write it in a background thread (the class docstring)."""
        raise NotImplementedError("implement AsyncCheckpointer.save (lectures/14-reliability.md, section 5)")

    def wait(self) -> None:
        """Finish the pending save, if any: join the writer, then commit (the class docstring)."""
        raise NotImplementedError("implement AsyncCheckpointer.wait (lectures/14-reliability.md, section 5)")

    # (Write any helper functions you need here.)


def train_and_checkpoint(
    state: State,
    path: str,
    steps: int,
    save_at: list[int],
    mode: str,
    group: Group = None,
) -> dict[str, Any]:
    """For the grader: `steps` training steps, each some compute and then 1 added to every tensor
    of `state` in place; after each step s in `save_at`, a checkpoint of the state to
    `path/step{s}`, with save_sharded (mode "sync") or one AsyncCheckpointer (mode "async",
    waited for after the last step). Returns {"blocked_s": how long each save call held the
    loop, "state": the final state}."""
    checkpointer = AsyncCheckpointer() if mode == "async" else None
    blocked = []
    work = torch.ones(128, 128)
    for step in range(steps):
        work = torch.tanh(work @ work / 128)  # the step's compute
        for tensor in state.values():
            tensor.add_(1.0)
        if step in save_at:
            start = time.perf_counter()
            if checkpointer is None:
                save_sharded(state, Path(path) / f"step{step}", group)
            else:
                checkpointer.save(state, Path(path) / f"step{step}", group)
            blocked.append(time.perf_counter() - start)
    if checkpointer is not None:
        checkpointer.wait()
    return {"blocked_s": blocked, "state": state}
