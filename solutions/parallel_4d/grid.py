"""The rank grid of a 4D-parallel run, and its process groups (lecture 12-4d-parallelism,
sections 2 and 3).

N = tp * cp * dp * pp ranks, each with one coordinate per dimension. `order` lists the
dimensions from the one whose coordinate changes FASTEST with the rank to the slowest, as
Megatron-Core's RankGenerator takes it. The default "tp-cp-dp-pp" (Megatron-Core's
"tp-cp-ep-dp-pp" without expert parallelism) keeps a tensor-parallel group on neighbouring ranks
(the GPUs of one server: TP communicates in every layer) and puts pipeline stages furthest
apart (they send one activation per micro-batch and can cross the network):

    rank = sum over dimensions x of coordinate_x * stride_x
    stride_x = product of the sizes of the dimensions before x in `order`

A group along some dimensions holds the ranks whose coordinates agree on every OTHER dimension.
RankGrid.groups has one entry per kind in GROUP_KINDS:

    "tp", "cp", "dp", "pp"   one dimension each
    "dp-cp"                  dp and cp together: the ranks that hold the same weights and average
                             their gradients (context parallelism splits the sequence, not the
                             weights, so cp ranks reduce gradients with the dp ranks)
    "embedding"              the first and the last rank of each "pp" group (just the one rank
                             when pp = 1): the stages that both hold the tied token embedding

Each group is a list of global ranks in increasing order; the groups of a kind are listed in the
order of their first rank. Example, 8 ranks, tp = 2, cp = 1, dp = 2, pp = 2, "tp-cp-dp-pp":
tp [[0, 1], [2, 3], [4, 5], [6, 7]], dp [[0, 2], [1, 3], [4, 6], [5, 7]], pp [[0, 4], [1, 5],
[2, 6], [3, 7]], embedding the same as pp.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch.distributed as dist

DIMENSIONS = ("tp", "cp", "dp", "pp")
GROUP_KINDS = ("tp", "cp", "dp", "pp", "dp-cp", "embedding")


@dataclass(frozen=True)
class RankGrid:
    """What rank_grid returns: the sizes, the order (fastest first) and every group of each kind."""

    sizes: dict[str, int]
    order: tuple[str, ...]
    groups: dict[str, list[list[int]]]

    @property
    def world_size(self) -> int:
        return self.sizes["tp"] * self.sizes["cp"] * self.sizes["dp"] * self.sizes["pp"]

    def members(self, kind: str, rank: int) -> list[int]:
        """The ranks of the group of `kind` that holds `rank`; [] when none does (a middle
        pipeline stage is in no "embedding" group)."""
        return next((group for group in self.groups[kind] if rank in group), [])

    def coordinate(self, dimension: str, rank: int) -> int:
        """The rank's coordinate along one of DIMENSIONS: its index in its group of that kind."""
        return self.members(dimension, rank).index(rank)


def rank_grid(world_size: int, tp: int, cp: int, pp: int, dp: int, order: str = "tp-cp-dp-pp") -> RankGrid:
    """The RankGrid of `world_size` ranks split into tp * cp * pp * dp (see the module docstring
    for the layout and the kinds of group). `order` names each of tp, cp, dp, pp exactly once,
    joined by "-". The groups are what Megatron-Core's RankGenerator(tp, ep=1, dp, pp, cp,
    order).get_ranks(kind) returns, and what torch's init_device_mesh builds for the mesh shape
    taken in the reverse order.

    Raises ValueError when a size is not a positive int (a float such as 2.0 is not an int, nor
    is a bool, though True == 1), when tp * cp * pp * dp != world_size, or when `order` is not
    such a permutation.
    """
    ### BEGIN SOLUTION
    sizes = {"tp": tp, "cp": cp, "dp": dp, "pp": pp}
    for name, size in sizes.items():
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"rank_grid: {name} must be a positive int, got {size!r}")
    if tp * cp * pp * dp != world_size:
        raise ValueError(f"rank_grid: tp*cp*pp*dp = {tp}*{cp}*{pp}*{dp} = {tp * cp * pp * dp}, not {world_size}")
    names = tuple(order.split("-"))
    if sorted(names) != sorted(DIMENSIONS):
        raise ValueError(f"rank_grid: order {order!r} must name each of tp, cp, dp, pp once, joined by '-'")
    strides, stride = {}, 1
    for name in names:  # the first name of `order` changes fastest
        strides[name] = stride
        stride *= sizes[name]

    def coordinates(rank: int) -> dict[str, int]:
        return {name: rank // strides[name] % sizes[name] for name in names}

    def along(dimensions: tuple[str, ...]) -> list[list[int]]:
        # Ranks that agree on every other dimension share a group: key each rank by those.
        groups: dict[tuple[int, ...], list[int]] = {}
        for rank in range(world_size):
            where = coordinates(rank)
            groups.setdefault(tuple(where[n] for n in names if n not in dimensions), []).append(rank)
        return sorted(groups.values())

    groups = {kind: along(tuple(kind.split("-"))) for kind in GROUP_KINDS if kind != "embedding"}
    groups["embedding"] = [sorted({g[0], g[-1]}) for g in groups["pp"]]
    return RankGrid(sizes=sizes, order=names, groups=groups)
    ### END SOLUTION


def build_groups(grid: RankGrid, rank: int) -> dict[str, dist.ProcessGroup]:
    """This rank's torch.distributed ProcessGroup of every kind in GROUP_KINDS, keyed by kind.

    dist.new_group is collective over the whole world: every rank must create every group, in
    the same order, even the groups it is not in (new_group returns a non-member placeholder
    there). So every rank walks GROUP_KINDS in order and, within a kind, grid.groups[kind] in
    order, calling new_group(ranks) for each; it keeps the group that holds `rank` (a middle
    pipeline stage has no "embedding" entry: it is in no such group). A rank that
    walks them in another order than its peers hangs the world (lecture, section 3).
    """
    ### BEGIN SOLUTION
    mine = {}
    for kind in GROUP_KINDS:
        for ranks in grid.groups[kind]:
            group = dist.new_group(ranks)
            if rank in ranks:
                mine[kind] = group
    return mine
    ### END SOLUTION


def grid_step(world_size: int, tp: int, cp: int, pp: int, dp: int, order: str = "tp-cp-dp-pp") -> dict:
    """Given (the grader calls it): rank_grid's answer as plain data, "sizes", "order", "groups"."""
    grid = rank_grid(world_size, tp, cp, pp, dp, order)
    groups = {kind: [list(g) for g in grid.groups[kind]] for kind in grid.groups}
    return {"sizes": dict(grid.sizes), "order": tuple(grid.order), "groups": groups}
