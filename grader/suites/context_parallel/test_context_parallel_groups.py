"""Hidden suite: context parallelism within process groups. In a gloo world of 4 ranks, ranks
{1, 3} run one instance as a context-parallel group of 2 (Group((1, 3))) while ranks {0, 2} run
another with other data, at the same time: ring attention (both layouts, causal), Ulysses and
all-gathered K/V, each instance against SDPA on its own whole sequence. A submission that sends
to global ranks, or takes its position in the sequence from the global rank, mixes the two.

The configuration sweep (reference.run_sweep): in a gloo world of 4, ranks (0, 1, 3) form a group
of 3 and rank 2 a group of 1, at the same time, with sizes that are no powers of two (b = 3, GQA
9/3, d = 6, s_local = 5, and 6 for zigzag): every variant, causal and not, forward and backward,
against SDPA; zigzag_shard and zigzag_unshard along dimension 1."""

from __future__ import annotations

import pytest

from grader.sandbox import Group
from grader.suites.context_parallel.reference import (
    SWEEP_CASES,
    SWEEP_GROUPS,
    Case,
    cut,
    make_data,
    run_sweep,
    sdpa_reference,
    step_for,
    zigzag,
)
from grader.testing import assert_matches

GROUPS = ((1, 3), (0, 2))
WORLD = 4
CASES = [
    Case("ring", "gqa", True),
    Case("zigzag", "mha", True),
    Case("ulysses", "gqa", True),
    Case("allgather_kv", "gqa", True),
]


def members(rank: int) -> tuple[int, ...]:
    return next(g for g in GROUPS if rank in g)


@pytest.mark.points(6)
def test_every_variant_within_two_groups_of_a_world_of_4(submission):
    data = {group: {h: make_data(2, h, "groups", group) for h in ("mha", "gqa")} for group in GROUPS}
    steps = []
    for r in range(WORLD):
        group = members(r)
        g = group.index(r)
        steps.append([step_for(c, data[group][c.heads], 2, g, Group(group), probes=False) for c in CASES])
    ranks = submission.script_spmd(WORLD, steps).steps
    for group in GROUPS:
        for i, case in enumerate(CASES):
            want = sdpa_reference(data[group][case.heads], case.causal)
            for g, r in enumerate(group):
                for key in ("output", "grad_q", "grad_k", "grad_v"):
                    where = (
                        f"{case.id} in the instance on ranks {set(group)} (Group({group})), global rank {r} "
                        f"(group rank {g}): {key}. Communicate within `group` (p2p calls take "
                        f"dist.get_global_rank(group, i)) and take positions from dist.get_rank(group)"
                    )
                    assert_matches(ranks[r][i][key], cut(want[key], case.variant, 2, g), where, 1e-10, 1e-10)


FUNCTION = {
    "ring": "ring_attention",
    "zigzag": "ring_attention(layout='zigzag')",
    "ulysses": "ulysses_attention",
    "allgather_kv": "allgather_kv_attention",
}


def _instance(group: tuple[int, ...]) -> str:
    return f"the cp group of global ranks {group} (p = {len(group)}) in a world of 4"


@pytest.mark.points(6)
def test_every_variant_in_a_group_of_ranks_0_1_3_beside_a_group_of_1_in_a_world_of_4(submission):
    """Sizes that are not powers of two (p = 3, b = 3, 9 query heads over 3 kv heads, d = 6,
    s_local = 5, odd, and 6 for zigzag), group ranks that are not the global ranks, and a group of
    one rank inside a bigger world: every variant, causal and not, output and gradients."""
    run = run_sweep(submission)
    ranks, index = run["result"].steps, run["index"]
    for group in SWEEP_GROUPS:
        p = len(group)
        for case in SWEEP_CASES:
            want = sdpa_reference(run["data"][group][case.variant], case.causal)
            for g, r in enumerate(group):
                got = ranks[r][index[("layer", case)]]
                for key in ("output", "grad_q", "grad_k", "grad_v"):
                    where = (
                        f"{FUNCTION[case.variant]}(causal={case.causal}) in {_instance(group)}, global rank {r} "
                        f"(group rank {g}), GQA 9/3, b = 3, d = 6, s_local = {got['output'].shape[2]}: {key}. The ring "
                        f"and the heads are those of `group` (its size, dist.get_rank(group), and "
                        f"dist.get_global_rank(group, i) for point-to-point peers), none is a power of two"
                    )
                    if key not in got:
                        raise AssertionError(f"{where}: missing from the result")
                    assert_matches(got[key], cut(want[key], case.variant, p, g), where, 1e-10, 1e-10)


@pytest.mark.points(2)
def test_zigzag_shard_and_unshard_along_dimension_1_in_a_group_of_3_and_a_group_of_1(submission):
    """zigzag_shard(x, group, dim=1) and zigzag_unshard of its result, x of shape (2, 6p, 6), in
    the sweep's groups: 6 chunks of 3 positions on the group of 3, 2 chunks of 3 on the group of 1."""
    run = run_sweep(submission)
    ranks, index = run["result"].steps, run["index"]
    for group in SWEEP_GROUPS:
        p, x = len(group), run["x"][group]
        for g, r in enumerate(group):
            where = f"in {_instance(group)}, global rank {r} (group rank {g}), x of shape {tuple(x.shape)}, dim=1"
            assert_matches(
                ranks[r][index["shard"]],
                zigzag(x, p, g, dim=1),
                f"zigzag_shard {where}: chunks {g} and {2 * p - 1 - g} of {2 * p} along dimension 1",
            )
            assert_matches(ranks[r][index["unshard"]], x, f"zigzag_unshard {where}: the whole sequence in order")
