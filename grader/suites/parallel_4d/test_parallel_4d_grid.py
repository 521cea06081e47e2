"""Hidden suite: rank_grid against Megatron-Core's RankGenerator (megatron.core.parallel_state,
the layout Megatron-LM trains with) and the course's ProcessGrid, for every factorisation of
worlds of 1, 6, 8, 12 and 16 ranks and the worlds of 24 where every size is 2 or 3 (no two kinds
of group with the same members; with pp = 3, "pp" and "embedding" differ too), in several orders,
and its refusals."""

from __future__ import annotations

import itertools
import warnings

import pytest

from grader.sandbox import Step
from grader.suites.parallel_4d.reference import KINDS, expected_groups
from grader.testing import expect_exception

ORDERS = ["tp-cp-dp-pp", "tp-dp-cp-pp", "tp-pp-dp-cp", "pp-dp-cp-tp", "cp-tp-pp-dp"]


def factorisations(world: int) -> list[dict[str, int]]:
    divisors = [k for k in range(1, world + 1) if world % k == 0]
    found = []
    for tp, cp, pp in itertools.product(divisors, repeat=3):
        if world % (tp * cp * pp) == 0:
            found.append({"tp": tp, "cp": cp, "pp": pp, "dp": world // (tp * cp * pp)})
    return found


CASES = [(world, sizes, order) for world in (1, 6, 8, 12, 16) for sizes in factorisations(world) for order in ORDERS]
# tp, cp, dp, pp each 2 or 3 on 24 ranks: no two kinds share members (but pp and embedding when pp = 2)
CASES += [(24, sizes, order) for sizes in factorisations(24) if min(sizes.values()) > 1 for order in ORDERS]


def grids_of(submission, cases):
    steps = [Step("grid_step", (w, s["tp"], s["cp"], s["pp"], s["dp"], o)) for w, s, o in cases]
    return submission.script(steps).steps[0]


def where(world, sizes, order) -> str:
    return (
        f"rank_grid({world}, tp={sizes['tp']}, cp={sizes['cp']}, pp={sizes['pp']}, dp={sizes['dp']}, order={order!r})"
    )


@pytest.mark.points(10)
def test_rank_grid_groups_equal_megatron_core_rank_generator(submission):
    """Megatron-Core 0.16's RankGenerator(tp, ep=1, dp, pp, cp, order with ep appended) gives
    every group of "tp", "cp", "dp", "pp" and "dp-cp"; "embedding" is the first and last rank of
    each pipeline group (Megatron's default embedding ranks; the one rank when pp = 1, not the
    whole group when pp >= 3). Every order of five."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no Transformer Engine or Apex here: not needed
        from megatron.core.parallel_state import RankGenerator
    grids = grids_of(submission, CASES)
    for (world, sizes, order), grid in zip(CASES, grids):
        generator = RankGenerator(sizes["tp"], 1, sizes["dp"], sizes["pp"], sizes["cp"], order + "-ep")
        for kind in KINDS[:5]:
            want = sorted(sorted(g) for g in generator.get_ranks(kind))
            got = grid["groups"].get(kind)
            assert got == want, f"{where(world, sizes, order)}.groups[{kind!r}]: expected {want}, got {got}"
        want = [sorted({g[0], g[-1]}) for g in want_pp(generator)]
        assert grid["groups"].get("embedding") == want, (
            f"{where(world, sizes, order)}.groups['embedding']: expected the first and last rank of each pp "
            f"group, {want}, got {grid['groups'].get('embedding')}"
        )


def want_pp(generator) -> list[list[int]]:
    return sorted(sorted(g) for g in generator.get_ranks("pp"))


@pytest.mark.points(4)
def test_rank_grid_sizes_order_and_coordinates_follow_the_strides(submission):
    """sizes and order as given; each rank's coordinate (its index in its group) is
    rank // stride % size, the ProcessGrid formula of lecture section 2."""
    cases = [(16, {"tp": 2, "cp": 2, "pp": 2, "dp": 2}, o) for o in ORDERS] + [
        (12, {"tp": 2, "cp": 1, "pp": 3, "dp": 2}, "tp-cp-dp-pp")
    ]
    for (world, sizes, order), grid in zip(cases, grids_of(submission, cases)):
        assert grid["sizes"] == sizes, f"{where(world, sizes, order)}.sizes: expected {sizes}, got {grid['sizes']}"
        assert tuple(grid["order"]) == tuple(order.split("-")), (
            f"{where(world, sizes, order)}.order: got {grid['order']}"
        )
        assert grid["groups"] == expected_groups(sizes, order), (
            f"{where(world, sizes, order)}: groups differ from ProcessGrid's"
        )


@pytest.mark.points(4)
@pytest.mark.parametrize(
    "args",
    [
        (8, 2, 2, 2, 2, "tp-cp-dp-pp"),  # product 16 on 8 ranks
        (8, 2, 1, 2, 1, "tp-cp-dp-pp"),  # product 4 on 8 ranks
        (8, 2, 2, 2, 1, "tp-cp-pp"),  # dp missing from the order
        (8, 2, 2, 2, 1, "tp-cp-dp-pp-tp"),  # tp twice
        (8, 2, 2, 2, 1, "tp-cp-ep-pp"),  # an unknown name
        (8, 0, 2, 2, 2, "tp-cp-dp-pp"),  # size 0
        (0, 0, 1, 1, 1, "tp-cp-dp-pp"),  # size 0 whose product is the world: only "positive" refuses it
        (-2, -1, 2, 1, 1, "tp-cp-dp-pp"),  # a negative size whose product is the world
        (8, 2.0, 2, 2, 1, "tp-cp-dp-pp"),  # a float
        (2, True, 1, 1, 2, "tp-cp-dp-pp"),  # a bool is no size
    ],
    ids=[
        "product-too-big",
        "product-too-small",
        "order-missing-dp",
        "order-repeats",
        "order-unknown",
        "zero",
        "zero-on-a-world-of-0",
        "negative-with-the-worlds-product",
        "float",
        "bool",
    ],
)
def test_rank_grid_refuses_sizes_that_do_not_fit_and_bad_orders(submission, args):
    expect_exception("ValueError", lambda: submission.function("rank_grid")(*args))
