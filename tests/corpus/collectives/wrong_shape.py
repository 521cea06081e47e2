"""ring_reduce_scatter returns the whole reduced tensor instead of this rank's chunk."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: ring.py
# select: ring_reduce_scatter_matches and (2-divisible-float32 or 2-empty-float32)
# fails: test_ring_reduce_scatter(?!.*empty)
# kind:
# message: rank \d: .*shape \(\d+,\), expected \(\d+,\)


def ring_reduce_scatter(tensor, group=None):
    return ring_allreduce(tensor.clone(), group).flatten()
