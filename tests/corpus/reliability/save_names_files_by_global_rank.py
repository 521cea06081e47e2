"""save_sharded uses the global rank, not the rank in the group: in the group {1, 3}, no rank
is 0, so nobody writes .metadata, and the files are named __1_0 and __3_0."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: checkpoint.py
# select: checkpoint and subgroup or (loads_on_another and 4-2)
# fails: test_a_checkpoint_saved_in_a_subgroup|test_two_subgroups_of_a_world_of_four_each_save_their_own_checkpoint
# kind:
# message: files named by the rank within the group


def save_sharded(state, path, group=None):
    records = write_shard(state, path, dist.get_rank())
    everyone = [None] * dist.get_world_size(group)
    dist.all_gather_object(everyone, records, group=group)
    tensors = {}
    for name, first in everyone[0].items():
        parts = [other[name] for other in everyone]
        rows = sum(part["rows"] for part in parts)
        chunks, start = [], 0
        for part in parts:
            if part["rows"]:
                where = {key: part[key] for key in ("file", "byte_offset", "byte_length")}
                chunks.append({"rows": (start, start + part["rows"]), **where})
            start += part["rows"]
        tensors[name] = {"shape": (rows, *first["trailing"]), "dtype": first["dtype"], "chunks": chunks}
    if dist.get_rank() == 0:
        write_metadata(path, tensors)
    dist.barrier(group=group)
