"""ring_reduce_scatter as a full ring allreduce followed by taking this rank's chunk: correct,
but it sends 2(p-1)/p * N bytes where (p-1)/p * N suffice (the all-gather half is wasted)."""

# target: ring.py


def ring_reduce_scatter(tensor, group=None):
    rank, p, _, _ = ring_neighbours(group)
    return ring_allreduce(tensor.clone(), group).flatten().tensor_split(p)[rank].clone()
