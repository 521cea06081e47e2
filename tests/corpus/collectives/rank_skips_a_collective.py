"""Rank 1 returns from ring_allreduce without taking part: its neighbours wait for it forever."""

# ruff: noqa: E501, F821 - a fragment appended to a solution file, whose names are in scope
# target: ring.py
# select: sums_in_place[2] or allreduce_time_ring_formula
# fails: sums_in_place
# kind: deadlock
# message: deadlocked: rank 0 waited in a communication call and no rank moved a byte for [\d.]+ s \(rank 1 had already returned\); where each rank was:\n  rank 0: ring\.py:\d+ in \w+\(\)

_correct_ring_allreduce = ring_allreduce


def ring_allreduce(tensor, group=None):
    if dist.get_rank(group) == 1:
        return tensor
    return _correct_ring_allreduce(tensor, group)
