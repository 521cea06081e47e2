"""write_shard torch.saves each shard as it comes, without a copy: a shard that is a view of the
whole parameter writes the whole storage behind it, so every rank writes the whole model. The
checkpoint still loads right (torch.load gives back the view's rows)."""
# target: checkpoint.py


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
            torch.save(tensor, out)
            records[name] = {**record, "byte_offset": start, "byte_length": out.tell() - start}
    return records
