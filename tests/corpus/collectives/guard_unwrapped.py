"""ring_allreduce reaches past the refusal to the original dist.all_reduce through the wrapper's __wrapped__."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: ring.py
# select: sums_in_place[2] or allreduce_time_ring_formula
# fails: .
# kind: forbidden
# message: ring\.py.*__wrapped__.*the grader refuses


def ring_allreduce(tensor, group=None):
    dist.all_reduce.__wrapped__(tensor, group=group)
    return tensor
