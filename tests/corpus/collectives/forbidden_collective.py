"""ring_allreduce calls dist.all_reduce, the very thing the exercise builds."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: ring.py
# select: sums_in_place[2] or allreduce_time_ring_formula
# fails: sums_in_place
# kind: forbidden
# message: ring_allreduce may not call torch\.distributed\.all_reduce


def ring_allreduce(tensor, group=None):
    dist.all_reduce(tensor, group=group)
    return tensor
