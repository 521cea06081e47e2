"""Hidden suite: context parallelism within process groups. In a gloo world of 4 ranks, ranks
{1, 3} run one instance as a context-parallel group of 2 (Group((1, 3))) while ranks {0, 2} run
another with other data, at the same time: ring attention (both layouts, causal), Ulysses and
all-gathered K/V, each instance against SDPA on its own whole sequence. A submission that sends
to global ranks, or takes its position in the sequence from the global rank, mixes the two."""

from __future__ import annotations

import pytest

from grader.sandbox import Group
from grader.suites.context_parallel.reference import Case, cut, make_data, sdpa_reference, step_for
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
