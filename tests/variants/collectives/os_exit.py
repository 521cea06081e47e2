"""ring_allgather ends its process with os._exit(0) on rank 1 only."""

# target: ring.py
import os

_correct_ring_allgather = ring_allgather


def ring_allgather(shard, group=None):
    if dist.get_rank(group) == 1:
        os._exit(0)
    return _correct_ring_allgather(shard, group)
