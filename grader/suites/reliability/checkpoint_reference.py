"""The hidden suite's own view of a sharded checkpoint, written apart from the solutions: the
row layout of fully_shard, states cut into views, and DCP's metadata read with DCP's own reader."""

from __future__ import annotations

from pathlib import Path

import torch
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint.metadata import MetadataIndex

from grader.testing import generator, random_tensor


def rows_of(rows: int, p: int, rank: int) -> tuple[int, int]:
    """fully_shard's Shard(0) layout: ceil(rows / p) rows per rank, the last ones short or empty."""
    block = -(-rows // p)
    return min(rank * block, rows), min(rank * block + block, rows)


def full_state(shapes: dict[str, tuple[int, ...]], dtype: torch.dtype, *salt: object) -> dict[str, torch.Tensor]:
    gen = generator("reliability-checkpoint", *salt)
    return {name: random_tensor(shape, dtype, gen) for name, shape in shapes.items()}


def shards(full: dict[str, torch.Tensor], p: int, views: bool = True) -> list[dict[str, torch.Tensor]]:
    """Each rank's state: its rows of every tensor, as views of the full tensor (views=True: a
    saver that torch.saves them without a copy writes the whole tensor) or as fresh zeros."""
    states = []
    for rank in range(p):
        state = {}
        for name, tensor in full.items():
            start, stop = rows_of(tensor.shape[0], p, rank)
            state[name] = tensor[start:stop] if views else torch.zeros_like(tensor[start:stop])
        states.append(state)
    return states


def chunks(path: Path) -> dict[str, list[tuple[tuple[int, int], str, int, int]]]:
    """Per tensor of the checkpoint in `path`: (rows, file, byte offset, byte length) of each
    chunk, read with torch.distributed.checkpoint's FileSystemReader."""
    metadata = FileSystemReader(str(path)).read_metadata()
    found = {}
    for name, entry in metadata.state_dict_metadata.items():
        found[name] = []
        for chunk in entry.chunks:
            info = metadata.storage_data[MetadataIndex(name, chunk.offsets)]
            rows = (int(chunk.offsets[0]), int(chunk.offsets[0] + chunk.sizes[0]))
            found[name].append((rows, info.relative_path, info.offset, info.length))
    return found


def spoil_chunks_not_needed(path: Path, rows_needed: dict[str, tuple[int, int]]) -> int:
    """Overwrite with zeros the blob of every chunk that overlaps none of `rows_needed` (per
    tensor, [start, stop)): a loader that reads it gets an unreadable blob. The count spoiled."""
    spoiled = 0
    for name, found in chunks(path).items():
        start, stop = rows_needed[name]
        for (first, last), file, offset, length in found:
            if max(first, start) < min(last, stop):
                continue
            with open(path / file, "r+b") as blob:
                blob.seek(offset)
                blob.write(bytes(length))
            spoiled += 1
    return spoiled
