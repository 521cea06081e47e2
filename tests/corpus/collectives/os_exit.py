"""Rank 1 leaves ring_allgather with os._exit(0): no exception, the process is just gone."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: ring.py
# select: allgather_concatenates or allreduce_time_ring_formula
# fails: allgather
# kind: crash
# message: rank 1: the process exited with code 0

import os

_correct_ring_allgather = ring_allgather


def ring_allgather(shard, group=None):
    if dist.get_rank(group) == 1:
        os._exit(0)
    return _correct_ring_allgather(shard, group)
