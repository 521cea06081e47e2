"""write_shard returns without os.fsync: every blob is right, but its bytes may still be only
in the page cache, and commit names the file in .metadata before a node crash could lose them."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: checkpoint.py
# select: fsyncs_its_file or write_shard_returns
# fails: test_write_shard_fsyncs_its_file_after_the_last_write
# kind:
# message: expected os\.fsync of __1_0\.distcp once all its \d+ bytes were written


def write_shard(state, path, rank):
    if not state:
        raise ValueError("state is empty")
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
    return records
