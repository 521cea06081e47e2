"""sync_weights takes engine_ranks[k]'s replica index k // tp for its tensor-parallel rank (it is
k % tp): with 2 replicas of tp 2, both ranks of replica 0 get tp rank 0's shard and both ranks
of replica 1 tp rank 1's."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: sync.py
# select: sync_weights_colocated_on_4 or sync_bytes_gives
# fails: sync_weights_colocated_on_4
# kind:
# message: replica 0, tp rank 1


def sync_weights(
    shards: dict[str, torch.Tensor] | None,
    config: TinyGPTConfig,
    trainer_ranks: list[int],
    engine_ranks: list[int],
    tp: int,
) -> dict[str, torch.Tensor] | None:
    world, me = dist.get_world_size(), dist.get_rank()
    units = _check_placement(config, trainer_ranks, engine_ranks, tp, world)
    t = len(trainer_ranks)
    chunk_sizes = {unit: -(-sum(s.numel() for _, s in members) // t) for unit, members in units.items()}
    dtype = _check_shards(shards, units, chunk_sizes, me in trainer_ranks, me)
    my_index = trainer_ranks.index(me) if me in trainer_ranks else None
    engines_only = [e for e in engine_ranks if e not in trainer_ranks]
    device = _device(shards)

    # The dtype, to the engine ranks that have no chunk to read it from.
    sends = []
    if my_index == 0:
        code = torch.tensor([WIRE_DTYPES.index(dtype)], dtype=torch.int64, device=device)
        sends += [dist.isend(code, e, tag=1) for e in engines_only]
    if me in engines_only:
        code = torch.empty(1, dtype=torch.int64, device=device)
        dist.recv(code, trainer_ranks[0], tag=1)
        dtype = WIRE_DTYPES[int(code)]

    # As a trainer rank: one message per engine rank holding elements of my chunks.
    if my_index is not None:
        for k, engine in enumerate(engine_ranks):
            if engine == me:
                continue
            pieces = [
                shards[unit][mine.to(device) - my_index * chunk_sizes[unit]]
                for unit, mine in _pieces(config, units, chunk_sizes, k // tp, tp, my_index)
            ]
            message = torch.cat(pieces) if pieces else torch.empty(0, dtype=dtype, device=device)
            if message.numel():
                sends.append(dist.isend(message.contiguous(), engine, tag=0))

    result = None
    if me in engine_ranks:
        k = engine_ranks.index(me)
        result = _receive(shards, config, units, chunk_sizes, trainer_ranks, k // tp, tp, me, dtype, device)
    for work in sends:
        work.wait()
    return result
