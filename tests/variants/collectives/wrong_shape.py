"""ring_reduce_scatter returns the whole reduced tensor instead of this rank's chunk."""
# target: ring.py


def ring_reduce_scatter(tensor, group=None):
    return ring_allreduce(tensor.clone(), group).flatten()
