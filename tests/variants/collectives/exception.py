"""ring_reduce_scatter raises an exception from the student's own line."""
# target: ring.py


def ring_reduce_scatter(tensor, group=None):
    chunks = tensor.flatten().tensor_split(dist.get_world_size(group))
    return chunks[dist.get_rank(group)] + chunks[dist.get_world_size(group)]  # off the end
