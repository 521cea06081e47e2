"""write_shard overwrites the shard file of an earlier checkpoint in the same folder and leaves
its .metadata in place: a save that dies part-way leaves the old metadata naming a file that is
half overwritten, a partial checkpoint that looks complete."""

# ruff: noqa: E501, F821 - a fragment appended to a solution file, whose names are in scope
# target: checkpoint.py
# select: checkpoint and (killed_part_way or disagree)
# fails: test_a_save_killed_part_way_leaves_no_checkpoint_and_the_previous_one_intact|test_ranks_that_disagree_all_raise_value_error_and_write_no_metadata
# kind:
# message: still holds a \.metadata|a \.metadata is left there


def write_shard(state, path, rank):
    if not state:
        raise ValueError("state is empty")
    for name, tensor in state.items():
        if not isinstance(tensor, torch.Tensor) or tensor.dim() == 0:
            raise ValueError(f"state[{name!r}] must be a tensor of >= 1 dim")
    Path(path).mkdir(parents=True, exist_ok=True)
    file, records = f"__{rank}_0.distcp", {}
    with open(Path(path) / file, "wb") as out:
        for name in sorted(state):
            tensor = state[name].detach()
            record = {"rows": tensor.shape[0], "trailing": tuple(tensor.shape[1:]), "dtype": tensor.dtype, "file": file}
            if tensor.shape[0] == 0:
                records[name] = {**record, "byte_offset": 0, "byte_length": 0}
                continue
            start = out.tell()
            torch.save(tensor.clone(), out)
            records[name] = {**record, "byte_offset": start, "byte_length": out.tell() - start}
        out.flush()
        os.fsync(out.fileno())
    return records
