"""load_resharded loads every chunk of every tensor and keeps the rows it needs: right values,
but each rank reads the whole checkpoint."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: checkpoint.py
# select: chunks_that_overlap or (loads_on_another and 4-2)
# fails: test_each_rank_reads_only_the_chunks_that_overlap_its_rows
# kind:
# message: reads chunks it does not need


def load_resharded(state, path, group=None):
    rank, size = rank_and_size(group)
    tensors = read_metadata(path)
    for name, target in state.items():
        shape = tensors[name]["shape"]
        start, stop = shard_rows(shape[0], size, rank)
        whole = torch.empty(shape, dtype=tensors[name]["dtype"])
        for chunk in tensors[name]["chunks"]:
            with open(Path(path) / chunk["file"], "rb") as blob:
                blob.seek(chunk["byte_offset"])
                piece = torch.load(io.BytesIO(blob.read(chunk["byte_length"])), weights_only=True)
            whole[chunk["rows"][0] : chunk["rows"][1]] = piece
        target.copy_(whole[start:stop])
    return state
