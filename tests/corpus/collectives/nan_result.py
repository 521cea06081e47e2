"""ring_allreduce returns NaN everywhere: a careless tolerance check (NaN compares false) would pass it."""

# target: ring.py
# select: sums_in_place[2] or allreduce_time_ring_formula
# fails: sums_in_place
# kind:
# message: rank 0: returned tensor: \d+ of \d+ elements differ; worst at index \(\d+, \d+\): got nan


def ring_allreduce(tensor, group=None):
    return tensor.fill_(float("nan"))
