"""The given ProcessGrid (grader/models/process_grid.py): Megatron-Core's rank layout, checked by
its arithmetic and against the groups torch.distributed.device_mesh.init_device_mesh builds."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grader.models.process_grid import DIMENSIONS, ProcessGrid
from grader.sandbox import Library


def test_megatron_example_of_16_ranks_tp2_dp2_pp4():
    """The layout of Megatron-Core's initialize_model_parallel docstring (order tp-dp-pp)."""
    grid = ProcessGrid(tp=2, dp=2, pp=4, order="tp-dp-pp")
    assert grid.world_size == 16
    assert grid.ranks("tp") == [[2 * i, 2 * i + 1] for i in range(8)]
    assert grid.ranks("dp")[:4] == [[0, 2], [1, 3], [4, 6], [5, 7]]
    assert grid.ranks("pp") == [[i, i + 4, i + 8, i + 12] for i in range(4)]
    assert grid.ranks("tp-dp-pp") == [list(range(16))]


@st.composite
def grids(draw) -> ProcessGrid:
    sizes = {name: draw(st.sampled_from([1, 1, 2, 3])) for name in DIMENSIONS}
    order = draw(st.permutations(DIMENSIONS))
    return ProcessGrid(sizes["tp"], sizes["cp"], sizes["pp"], sizes["dp"], ep=sizes["ep"], order="-".join(order))


@settings(max_examples=60, deadline=None)
@given(grids(), st.data())
def test_groups_along_any_dimensions_partition_the_world_and_are_orthogonal(grid, data):
    first = data.draw(st.lists(st.sampled_from(DIMENSIONS), min_size=1, max_size=3, unique=True))
    rest = [n for n in DIMENSIONS if n not in first]
    groups = grid.ranks("-".join(first))
    assert sorted(r for g in groups for r in g) == list(range(grid.world_size)), "every rank in exactly one group"
    for group in groups:  # members differ only along `first`
        coordinates = [grid.coordinates(r) for r in group]
        assert all(all(c[n] == coordinates[0][n] for n in rest) for c in coordinates), (grid, first, group)
    if rest:  # a group along `first` and one along the other dimensions share exactly one rank
        other = grid.ranks("-".join(rest))
        assert all(len(set(g) & set(h)) == 1 for g in groups for h in other)


@settings(max_examples=60, deadline=None)
@given(grids())
def test_coordinates_and_rank_of_are_inverse(grid):
    for rank in range(grid.world_size):
        assert grid.rank_of(**grid.coordinates(rank)) == rank


def test_order_of_the_dimensions_named_does_not_matter():
    grid = ProcessGrid(tp=2, cp=2, dp=2)
    assert grid.ranks("dp-cp") == grid.ranks("cp-dp") == [[0, 2, 4, 6], [1, 3, 5, 7]]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"tp": 0},
        {"dp": 1.5},
        {"pp": True},
        {"tp": 2, "order": "tp-tp"},
        {"tp": 2, "order": "tp-xp"},
        {"pp": 2, "order": "tp-dp"},
    ],
)
def test_bad_sizes_and_orders_raise_value_error(kwargs):
    with pytest.raises(ValueError, match="ProcessGrid"):
        ProcessGrid(**kwargs)


def test_unknown_dimensions_and_coordinates_raise_value_error():
    grid = ProcessGrid(tp=2, pp=2)
    for call in (
        lambda: grid.ranks("xp"),
        lambda: grid.ranks("tp-tp"),
        lambda: grid.coordinates(4),
        lambda: grid.rank_of(tp=2),
    ):
        with pytest.raises(ValueError, match="ProcessGrid"):
            call()


@pytest.fixture(scope="module")
def library():
    library = Library()
    yield library
    library.close()


@pytest.mark.parametrize(
    ("sizes", "order"),
    [
        ({"tp": 2, "pp": 2, "dp": 2}, "tp-cp-ep-dp-pp"),
        ({"tp": 2, "cp": 2, "dp": 2}, "tp-cp-ep-dp-pp"),
        ({"tp": 2, "pp": 2, "dp": 2}, "tp-pp-dp"),
    ],
)
def test_groups_equal_init_device_mesh_for_the_reversed_shape(library, sizes, order):
    """torch.distributed.device_mesh.init_device_mesh on a gloo world of 8: the mesh's dimensions
    are the grid's in reverse order (row-major: the last changes fastest). ProcessGrid.group
    builds the same groups in the same world."""
    grid = ProcessGrid(**sizes, order=order)
    names = [n for n in reversed(grid.order) if grid.sizes[n] > 1]
    flattened = [[n for n in names if n in ("dp", "cp")]] if {"dp", "cp"} <= set(names) else []
    mesh = library.spmd(
        "grader.library:device_mesh_groups", 8, [([grid.sizes[n] for n in names], names, flattened)] * 8
    )
    dims = [*names, *("-".join(f) for f in flattened)]
    built = library.spmd("grader.library:process_grid_groups", 8, [(sizes, order, dims)] * 8)
    for rank, (groups, ours) in enumerate(zip(mesh.outputs, built.outputs)):
        for dims, members in groups.items():
            assert grid.group_ranks(dims, rank) == members == ours[dims], (
                f"rank {rank}: init_device_mesh's {dims} group is {members}, ProcessGrid's "
                f"{grid.group_ranks(dims, rank)}, ProcessGrid.group's {ours[dims]}"
            )
