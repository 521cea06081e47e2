"""A weight sync by all-gather: every trainer rank sends its chunk of every unit to every other rank
of the world (the point-to-point form of dist.all_gather, which sync_weights may not call), every
rank rebuilds the whole model, and engine ranks slice their shards from it. Right values; but it
moves the whole model to every rank, padding included, where an engine rank of tp 2 needs a
little more than half of it and a rank outside engine_ranks needs nothing."""
# target: sync.py


def sync_weights(shards, config, trainer_ranks, engine_ranks, tp):
    world, me = dist.get_world_size(), dist.get_rank()
    units = _check_placement(config, trainer_ranks, engine_ranks, tp, world)
    t = len(trainer_ranks)
    sizes = {unit: -(-sum(s.numel() for _, s in members) // t) for unit, members in units.items()}
    dtype = _check_shards(shards, units, sizes, me in trainer_ranks, me)
    if dtype is None:  # every rank learns the dtype, as in the reference
        code = torch.empty(1, dtype=torch.int64)
        dist.recv(code, trainer_ranks[0], tag=1)
        dtype = WIRE_DTYPES[int(code)]
    works = []
    if me == trainer_ranks[0]:
        code = torch.tensor([WIRE_DTYPES.index(dtype)], dtype=torch.int64)
        works += [dist.isend(code, r, tag=1) for r in range(world) if r not in trainer_ranks]
    gathered = {}
    for index, source in enumerate(trainer_ranks):
        if source == me:
            gathered[index] = torch.cat([shards[u] for u in units])
        else:
            gathered[index] = torch.empty(sum(sizes.values()), dtype=dtype)
            works.append(dist.irecv(gathered[index], source, tag=0))
    if shards is not None:
        mine = torch.cat([shards[u] for u in units])
        works += [dist.isend(mine, r, tag=0) for r in range(world) if r != me]
    for work in works:
        work.wait()
    if me not in engine_ranks:
        return None
    tp_rank = engine_ranks.index(me) % tp
    pieces = torch.stack([gathered[i] for i in range(t)])  # (t, sum of chunk sizes)
    result, start = {}, 0
    for unit, members in units.items():
        flat = pieces[:, start : start + sizes[unit]].reshape(-1)
        start += sizes[unit]
        offset = 0
        for name, shape in members:
            full = flat[offset : offset + shape.numel()].view(shape)
            result[name] = tp_shard(name, full, tp_rank, tp, config)
            offset += shape.numel()
    return result
