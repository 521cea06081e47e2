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
    ### BEGIN SOLUTION
    if not state:
        raise ValueError("state is empty: nothing to checkpoint")
    for name, tensor in state.items():
        if not isinstance(tensor, torch.Tensor) or tensor.dim() == 0:
            raise ValueError(f"state[{name!r}] must be a tensor of >= 1 dim, not {type(tensor).__name__}")
    Path(path).mkdir(parents=True, exist_ok=True)
    # The old checkpoint stops being one before its files change (every rank removes it: the
    # first to get here does, the others find it gone).
    (Path(path) / METADATA).unlink(missing_ok=True)
    file, records = f"__{rank}_0.distcp", {}
    with open(Path(path) / file, "wb") as out:
        for name in sorted(state):
            tensor = state[name].detach()
            record = {"rows": tensor.shape[0], "trailing": tuple(tensor.shape[1:]), "dtype": tensor.dtype, "file": file}
            if tensor.shape[0] == 0:
                records[name] = {**record, "byte_offset": 0, "byte_length": 0}
                continue
            start = out.tell()
            torch.save(tensor.clone(), out)  # clone: a storage of the shard's bytes only
            records[name] = {**record, "byte_offset": start, "byte_length": out.tell() - start}
        out.flush()
        os.fsync(out.fileno())  # on the disk before commit writes .metadata, which names this file
    return records
    ### END SOLUTION


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
    ### BEGIN SOLUTION
    rank, size = rank_and_size(group)
    everyone = [records]
    if size > 1:
        everyone = [None] * size
        dist.all_gather_object(everyone, records, group=group)  # every rank checks, so all raise alike
    if any(set(other) != set(everyone[0]) for other in everyone):
        raise ValueError(f"the ranks checkpoint different names: {[sorted(other) for other in everyone]}")
    tensors = {}
    for name, first in everyone[0].items():
        parts = [other[name] for other in everyone]
        if any((part["trailing"], part["dtype"]) != (first["trailing"], first["dtype"]) for part in parts):
            raise ValueError(f"{name!r}: the ranks hold shards of different trailing shapes or dtypes")
        rows = sum(part["rows"] for part in parts)
        chunks, start = [], 0
        for r, part in enumerate(parts):
            if shard_rows(rows, size, r) != (start, start + part["rows"]):
                raise ValueError(f"{name!r}: rank {r} holds {part['rows']} rows, not rows {shard_rows(rows, size, r)}")
            if part["rows"]:
                where = {key: part[key] for key in ("file", "byte_offset", "byte_length")}
                chunks.append({"rows": (start, start + part["rows"]), **where})
            start += part["rows"]
        tensors[name] = {"shape": (rows, *first["trailing"]), "dtype": first["dtype"], "chunks": chunks}
    if rank == 0:
        write_metadata(path, tensors)
    if size > 1:
        dist.barrier(group=group)  # nobody returns before the checkpoint is complete
    ### END SOLUTION


def save_sharded(state: State, path: str | os.PathLike, group: Group = None) -> None:
    """Save a sharded state: each rank of `group` passes its own shards (rows shard_rows(R, p,
    rank) of each tensor, p the group's size, rank its rank in the group) and writes only them
    (write_shard with that rank in the group, not the global rank: files __0_0.distcp ..
    __{p-1}_0.distcp), then commit. Every rank passes the same names, trailing shapes and dtypes.
    Returns when the checkpoint is complete on every rank. Raises ValueError where write_shard
    or commit does.
    """
    ### BEGIN SOLUTION
    rank, _ = rank_and_size(group)
    commit(write_shard(state, path, rank), path, group)
    ### END SOLUTION


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
    ### BEGIN SOLUTION
    rank, size = rank_and_size(group)
    tensors = read_metadata(path)
    for name, target in state.items():
        if name not in tensors:
            raise ValueError(f"{name!r} is not in the checkpoint at {path} (it holds {sorted(tensors)})")
        shape, dtype = tensors[name]["shape"], tensors[name]["dtype"]
        start, stop = shard_rows(shape[0], size, rank)
        wanted = (stop - start, *shape[1:])
        if tuple(target.shape) != wanted or target.dtype != dtype:
            raise ValueError(
                f"{name!r}: the checkpoint holds {dtype} of shape {tuple(shape)}, so rank {rank} of {size} "
                f"expects {dtype} of shape {wanted}; state has {target.dtype} of shape {tuple(target.shape)}"
            )
        for chunk in tensors[name]["chunks"]:
            first, last = chunk["rows"]
            lo, hi = max(first, start), min(last, stop)
            if lo >= hi:
                continue  # this chunk holds none of our rows: never read it
            with open(Path(path) / chunk["file"], "rb") as blob:
                blob.seek(chunk["byte_offset"])
                piece = torch.load(io.BytesIO(blob.read(chunk["byte_length"])), weights_only=True)
            with torch.no_grad():
                target[lo - start : hi - start].copy_(piece[lo - first : hi - first])
    return state
    ### END SOLUTION


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
        ### BEGIN SOLUTION
        self._thread: threading.Thread | None = None
        self._pending: tuple[Any, ...] = ()
        self._outcome: dict[str, Any] = {}
        ### END SOLUTION

    def save(self, state: State, path: str | os.PathLike, group: Group = None) -> None:
        """Snapshot `state` into memory and write it in a background thread (the class docstring)."""
        ### BEGIN SOLUTION
        self.wait()
        snapshot = {name: tensor.detach().clone() for name, tensor in state.items()}  # the checkpoint's content
        rank, _ = rank_and_size(group)
        self._pending, self._outcome = (path, group), {}
        self._thread = threading.Thread(target=self._write, args=(snapshot, path, rank), daemon=True)
        self._thread.start()
        ### END SOLUTION

    def wait(self) -> None:
        """Finish the pending save, if any: join the writer, then commit (the class docstring)."""
        ### BEGIN SOLUTION
        if self._thread is None:
            return
        self._thread.join()
        self._thread = None
        if "error" in self._outcome:
            raise self._outcome["error"]
        commit(self._outcome["records"], *self._pending)
        ### END SOLUTION

    ### BEGIN SOLUTION
    def _write(self, snapshot: State, path: str | os.PathLike, rank: int) -> None:
        try:
            self._outcome["records"] = write_shard(snapshot, path, rank)
        except Exception as error:  # handed to wait(), in the training thread
            self._outcome["error"] = error

    ### END SOLUTION


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
