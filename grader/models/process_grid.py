"""The process grid of a 4D-parallel run: which ranks share a tensor-, context-, expert-, data-
or pipeline-parallel group (given code; the capstone asks students to write it).

A run on N = tp * cp * ep * dp * pp ranks gives every rank one coordinate per dimension. The
`order` string lists the dimensions from the one whose coordinate changes fastest with the rank
to the slowest. Megatron-Core's default, "tp-cp-ep-dp-pp", puts a tensor-parallel group on
neighbouring ranks (the GPUs of one server, joined by NVLink: TP communicates every layer) and
pipeline stages furthest apart (they exchange only activations, point to point, and can cross
the slower network between servers):

    rank = sum over dimensions d of coordinate_d * stride_d,
    stride_d = product of the sizes of the dimensions before d in `order`

A group along some dimensions ("tp", or "dp-cp" for the data-parallel group of the gradients'
all-reduce under context parallelism) is the set of ranks whose coordinates agree on every OTHER
dimension. This is what Megatron-Core's `RankGenerator.get_ranks` (megatron/core/
parallel_state.py, with `generate_masked_orthogonal_rank_groups`) computes, and what
`torch.distributed.device_mesh.init_device_mesh` builds for the mesh shape taken in the reverse
order (a mesh is row-major: its LAST dimension changes fastest). tests/test_process_grid.py checks
both descriptions give the same groups.

Example, 16 ranks, tp=2, dp=2, pp=4, order "tp-dp-pp": tensor-parallel groups [0, 1], [2, 3],
...; data-parallel groups [0, 2], [1, 3], [4, 6], ...; pipeline groups [0, 4, 8, 12],
[1, 5, 9, 13], [2, 6, 10, 14], [3, 7, 11, 15].
"""

from __future__ import annotations

import math
from typing import Any

DIMENSIONS = ("tp", "cp", "ep", "dp", "pp")


class ProcessGrid:
    """The grid of tp * cp * ep * dp * pp ranks in `order` (fastest-changing dimension first).

    `order` names each dimension once, separated by "-"; a dimension of size 1 may be left out
    (it is appended, as Megatron-Core does). Raises ValueError for a size that is not a positive
    integer, an unknown or repeated name, or a dimension of size > 1 missing from `order`.

    Pure arithmetic (`ranks`, `coordinates`, `rank_of`) needs no process group; `group` builds
    torch.distributed groups and must be called by every rank of the world, in the same order.
    """

    def __init__(
        self, tp: int = 1, cp: int = 1, pp: int = 1, dp: int = 1, *, ep: int = 1, order: str = "tp-cp-ep-dp-pp"
    ) -> None:
        sizes = {"tp": tp, "cp": cp, "ep": ep, "dp": dp, "pp": pp}
        for name, size in sizes.items():
            if isinstance(size, bool) or not isinstance(size, int) or size < 1:
                raise ValueError(f"ProcessGrid: {name} must be a positive integer, got {size!r}")
        names = order.split("-")
        unknown = [n for n in names if n not in sizes]
        if unknown or len(set(names)) != len(names):
            raise ValueError(f"ProcessGrid: order {order!r} must name each of {', '.join(DIMENSIONS)} at most once")
        missing = [n for n in DIMENSIONS if n not in names and sizes[n] > 1]
        if missing:
            raise ValueError(f"ProcessGrid: order {order!r} leaves out {', '.join(missing)}, of size > 1")
        self.order = tuple(names) + tuple(n for n in DIMENSIONS if n not in names)
        self.sizes = {name: sizes[name] for name in self.order}
        self.strides: dict[str, int] = {}
        stride = 1
        for name in self.order:  # the first dimension of `order` changes fastest
            self.strides[name] = stride
            stride *= self.sizes[name]
        self.world_size = stride
        self._groups: dict[tuple[str, ...], Any] = {}

    def coordinates(self, rank: int) -> dict[str, int]:
        """The rank's coordinate along every dimension ({"tp": 1, "cp": 0, ...})."""
        if not 0 <= rank < self.world_size:
            raise ValueError(f"ProcessGrid: rank {rank} is outside a grid of {self.world_size} ranks")
        return {name: rank // self.strides[name] % self.sizes[name] for name in self.order}

    def rank_of(self, **coordinates: int) -> int:
        """The rank at these coordinates (0 for a dimension not given)."""
        for name, value in coordinates.items():
            if name not in self.sizes or not 0 <= value < self.sizes[name]:
                raise ValueError(f"ProcessGrid: no coordinate {name}={value} in a grid of sizes {self.sizes}")
        return sum(value * self.strides[name] for name, value in coordinates.items())

    def ranks(self, dimensions: str) -> list[list[int]]:
        """Every group along `dimensions` ("tp", "dp-cp", ...), as lists of global ranks: a group
        holds the ranks that agree on every other dimension, ordered with the first dimension of
        `order` among `dimensions` changing fastest; groups are listed the same way over the
        other dimensions. Megatron-Core's RankGenerator.get_ranks(dimensions)."""
        inside = self._parse(dimensions)
        outside = [n for n in self.order if n not in inside]
        inside = [n for n in self.order if n in inside]  # the grid's order, whatever the token's
        groups = []
        for fixed in self._walk(outside):
            base = sum(fixed[n] * self.strides[n] for n in outside)
            groups.append([base + sum(c[n] * self.strides[n] for n in inside) for c in self._walk(inside)])
        return groups

    def group_ranks(self, dimensions: str, rank: int) -> list[int]:
        """The ranks of the group along `dimensions` that holds `rank`."""
        return next(g for g in self.ranks(dimensions) if rank in g)

    def group(self, dimensions: str) -> Any:
        """This rank's torch.distributed ProcessGroup along `dimensions`. Every rank of the world
        creates every group along `dimensions` (dist.new_group is collective over the world), so
        all ranks must call group() with the same dimensions in the same order; a second call
        returns the group made by the first."""
        import torch.distributed as dist

        key = tuple(n for n in self.order if n in self._parse(dimensions))
        if key not in self._groups:
            if dist.get_world_size() != self.world_size:
                raise ValueError(
                    f"ProcessGrid of {self.world_size} ranks ({self.sizes}) in a world of {dist.get_world_size()}"
                )
            mine = None
            for ranks in self.ranks(dimensions):
                made = dist.new_group(ranks)
                if dist.get_rank() in ranks:
                    mine = made
            self._groups[key] = mine
        return self._groups[key]

    def _parse(self, dimensions: str) -> set[str]:
        names = dimensions.split("-")
        if any(n not in self.sizes for n in names) or len(set(names)) != len(names):
            raise ValueError(f"ProcessGrid: {dimensions!r} must name distinct dimensions among {', '.join(self.order)}")
        return set(names)

    def _walk(self, names: list[str]) -> list[dict[str, int]]:
        """Every combination of coordinates along `names`, the first changing fastest."""
        total = math.prod(self.sizes[n] for n in names)
        combinations = []
        for index in range(total):
            coordinate = {}
            for name in names:
                index, coordinate[name] = divmod(index, self.sizes[name])
            combinations.append(coordinate)
        return combinations

    def __repr__(self) -> str:
        shown = ", ".join(f"{n}={s}" for n, s in self.sizes.items())
        return f"ProcessGrid({shown}, order={'-'.join(self.order)!r})"
