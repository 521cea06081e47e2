# Your working copy: replace every `raise NotImplementedError` with your implementation.
# (Generated from the course's reference by `python -m grader sync`.)
"""Where the bytes of a collective go: link loads by class (lecture 13-the-cluster, section 4).

A message from GPU a to GPU b crosses the links of cluster.path(a, b) (grader/models/cluster.py):
NVLink inside a node; between nodes the NICs, and the spine when the two NICs hang off different
leaves. A link carries each byte of each message that crosses it, once per direction it is used.
"""

from __future__ import annotations

from grader.models.cluster import Cluster, link_class


def link_loads(cluster: Cluster, groups: list[list[int]], nbytes: int) -> dict[str, float]:
    """Bytes on each link class of `cluster` when every group of `groups` (a list of GPU ids, in
    ring order) all-reduces `nbytes` with lecture 1's ring, all groups at the same time: GPU
    group[i] sends 2(p-1)/p * nbytes to group[(i+1) % p] (p = its group's size; a group of one
    sends nothing). A group is any GPUs of the cluster in any order, of any size (a rail across
    nodes, a node other than node 0, a scattered set), and groups may differ in size.
    Returns {"nvlink": ..., "nic": ..., "spine": ...}, each the bytes summed over every link of
    the class (a message counts once on every link of its cluster.path), equal to the
    simulator's Simulation.bytes_by_class() of those rings.

    Use it to compare placements: data-parallel groups of one local rank across the nodes of a
    pod put nothing on the spine of a rail-optimised cluster, and a tensor-parallel group inside
    a node puts everything on NVLink.
    Raises ValueError when a GPU is not in the cluster or is named twice (in two groups, or twice
    in one group), and for nbytes < 0; a transfer the topology does not connect raises
    ScheduleError (a ValueError).
    """
    raise NotImplementedError("implement link_loads (lectures/13-the-cluster.md, section 4)")
