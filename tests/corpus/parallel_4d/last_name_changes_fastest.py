"""rank_grid reads `order` backwards (its last name changing fastest), so tp groups span the nodes."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: grid.py
# select: rank_grid
# fails: test_rank_grid_groups_equal_megatron|test_rank_grid_sizes_order|test_rank_grid_of_8_ranks
# kind:
# message: groups\[.\w+.\]: expected \[\[


_reference_rank_grid = rank_grid


def rank_grid(world_size, tp, cp, pp, dp, order="tp-cp-dp-pp"):
    grid = _reference_rank_grid(world_size, tp, cp, pp, dp, "-".join(reversed(order.split("-"))))
    return RankGrid(sizes=grid.sizes, order=tuple(order.split("-")), groups=grid.groups)
