"""ring_reduce_scatter raises an IndexError from the student's own line."""

# ruff: noqa: E501, F821 - a fragment appended to a solution file, whose names are in scope
# target: ring.py
# select: ring_reduce_scatter_matches and 2-divisible-float32 or allreduce_time_ring_formula
# fails: reduce_scatter
# kind: exception
# message: every rank: \n\s+File \"collectives/ring\.py\", line \d+, in ring_reduce_scatter\n(.*\n)+\s+IndexError: tuple index out of range


def ring_reduce_scatter(tensor, group=None):
    chunks = tensor.flatten().tensor_split(dist.get_world_size(group))
    return chunks[dist.get_rank(group)] + chunks[dist.get_world_size(group)]  # off the end
