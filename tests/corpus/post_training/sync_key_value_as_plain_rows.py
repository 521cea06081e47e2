"""sync_weights splits key_value like any column-parallel weight, by plain rows: engine tp rank 0
gets the keys of every kv head and rank 1 every value, where each rank needs the keys and the
values of its own kv heads (tp_shard's key_value layout)."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: sync.py
# select: sync_weights_colocated_on_4 or sync_weights_disaggregated_gives or sync_bytes_gives
# fails: sync_weights_colocated_on_4|sync_weights_disaggregated_gives
# kind:
# message: key_value\.weight


def _shard_positions(config, units, tp_rank, tp):
    out = []
    for unit, members in units.items():
        offset = 0
        for name, shape in members:
            positions = torch.arange(offset, offset + shape.numel()).view(shape)
            if tp_kind(name) == "key_value":
                mine = positions.chunk(tp, dim=0)[tp_rank].contiguous()
            else:
                mine = tp_shard(name, positions, tp_rank, tp, config)
            out.append((unit, name, mine))
            offset += shape.numel()
    return out
