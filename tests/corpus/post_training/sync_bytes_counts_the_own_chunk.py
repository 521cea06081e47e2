"""sync_bytes counts every element of an engine rank's shard as sent, even the part of its own
trainer chunk a colocated rank already holds: right when trainer and engine share no rank,
too high whenever they overlap."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: sync.py
# select: sync_bytes
# fails: colocated-2-replicas|colocated-4-as|out-of-order-overlapping|trainer-of-3-padded|worked_values
# kind:
# message: unless that is e itself


def sync_bytes(config, trainer_ranks, engine_ranks, tp, bytes_per_element=4):
    units = _check_placement(config, trainer_ranks, engine_ranks, tp, None)
    if not isinstance(bytes_per_element, int) or bytes_per_element < 1:
        raise ValueError(f"bytes_per_element must be an integer >= 1, got {bytes_per_element!r}")
    t = len(trainer_ranks)
    sizes = {unit: -(-sum(s.numel() for _, s in members) // t) for unit, members in units.items()}
    sent, received = dict.fromkeys(trainer_ranks, 0), dict.fromkeys(engine_ranks, 0)
    for k, engine in enumerate(engine_ranks):
        for unit, _, positions in _shard_positions(config, units, k % tp, tp):
            owners = torch.bincount(positions.reshape(-1) // sizes[unit], minlength=t).tolist()
            for index, count in enumerate(owners):
                sent[trainer_ranks[index]] += count * bytes_per_element
                received[engine] += count * bytes_per_element
    ranks = list(trainer_ranks) + [e for e in engine_ranks if e not in trainer_ranks]
    return {rank: (sent.get(rank, 0), received.get(rank, 0)) for rank in ranks}
