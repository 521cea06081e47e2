"""commit's barrier comes before rank 0 writes .metadata, not after: the other ranks return while
the checkpoint is still incomplete, and go on even when rank 0 never manages to write it."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: checkpoint.py
# select: checkpoint and before_rank_0_has_written
# fails: test_no_rank_returns_from_save_sharded_before_rank_0_has_written_the_metadata
# kind:
# message: returned from save_sharded and went on


def commit(records, path, group=None):
    rank, size = rank_and_size(group)
    everyone = [records]
    if size > 1:
        everyone = [None] * size
        dist.all_gather_object(everyone, records, group=group)
    tensors = {}
    for name, first in everyone[0].items():
        if any(set(other) != set(everyone[0]) for other in everyone):
            raise ValueError("the ranks checkpoint different names")
        parts = [other[name] for other in everyone]
        rows = sum(part["rows"] for part in parts)
        chunks, start = [], 0
        for r, part in enumerate(parts):
            if shard_rows(rows, size, r) != (start, start + part["rows"]):
                raise ValueError(f"{name!r}: rank {r} holds rows that are not its shard")
            if part["rows"]:
                where = {key: part[key] for key in ("file", "byte_offset", "byte_length")}
                chunks.append({"rows": (start, start + part["rows"]), **where})
            start += part["rows"]
        tensors[name] = {"shape": (rows, *first["trailing"]), "dtype": first["dtype"], "chunks": chunks}
    if size > 1:
        dist.barrier(group=group)  # too early: rank 0 has not written anything yet
    if rank == 0:
        write_metadata(path, tensors)
