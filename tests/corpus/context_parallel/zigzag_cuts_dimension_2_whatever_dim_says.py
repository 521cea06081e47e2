"""zigzag_shard and zigzag_unshard cut dimension 2, the sequence of the (b, h, s, d) layout,
whatever `dim` says: right for every call with the default, a wrong shard for dim=1."""

# ruff: noqa: E501, F821 - a fragment appended to a solution file, whose names are in scope
# target: ring.py
# select: zigzag_shard_gives or zigzag_shard_and_unshard
# fails: zigzag_shard_and_unshard_along_dimension_1
# kind:
# message: zigzag_shard in the cp group of global ranks \(0, 1, 3\) \(p = 3\) in a world of 4, global rank 0 \(group rank 0\), x of shape \(2, 18, 6\), dim=1: chunks 0 and 5 of 6 along dimension 1: shape \(2, 18, 2\), expected \(2, 6, 6\)


def zigzag_shard(x, group=None, dim=2):
    rank, p = dist.get_rank(group), dist.get_world_size(group)
    if x.shape[2] % (2 * p):
        raise ValueError(f"zigzag_shard: {x.shape[2]} positions do not split into {2 * p} chunks")
    chunks = x.chunk(2 * p, dim=2)
    return torch.cat([chunks[rank], chunks[2 * p - 1 - rank]], dim=2)


def zigzag_unshard(x, group=None, dim=2):
    p = dist.get_world_size(group)
    if x.shape[2] % 2:
        raise ValueError(f"zigzag_unshard: a shard of {x.shape[2]} positions does not hold two equal chunks")
    local = x.movedim(2, 0).contiguous()
    gathered = local.new_empty((p * local.shape[0], *local.shape[1:]))
    dist.all_gather_single(gathered, local, group=group)
    halves = gathered.view(p, *local.shape).chunk(2, dim=1)
    order = [halves[0][r] for r in range(p)] + [halves[1][r] for r in reversed(range(p))]
    return torch.cat(order, dim=0).movedim(0, 2)
