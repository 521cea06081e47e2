"""Hidden suite: link_loads against the simulator (grader.models.cluster.simulate) replaying the
same rings: data-parallel groups on rail-optimised and fat-tree clusters, tensor-parallel groups
inside a node and across nodes, groups of one, mixed sizes (3, 5, 6, 7: no power of two), groups
in any order of GPUs that are not 0..p-1 (a rail, a node other than node 0, scattered sets); and
its refusals."""

from __future__ import annotations

import math

import pytest

from grader.models.cluster import Cluster, simulate
from grader.sandbox import Step, SubmissionError
from grader.suites.cluster import reference

RAIL = Cluster.h100_cluster(8)
FAT_TREE = Cluster.h100_cluster(8, topology="fat_tree", oversubscription=2.0)
TWO_PODS = Cluster.h100_cluster(40)


def data_parallel(cluster: Cluster) -> list[list[int]]:
    """One group per local rank, across every node."""
    g = cluster.gpus_per_node
    return [[node * g + local for node in range(cluster.nodes)] for local in range(g)]


def tensor_parallel(cluster: Cluster, size: int, inside: bool) -> list[list[int]]:
    """Groups of `size` consecutive GPUs (inside a node) or of one local rank on `size` nodes."""
    g = cluster.gpus_per_node
    if inside:
        return [list(range(start, start + size)) for start in range(0, cluster.num_gpus, size)]
    return [
        [(block + k) * g + local for k in range(size)] for block in range(0, cluster.nodes, size) for local in range(g)
    ]


CASES = [
    ("data-parallel on rails", RAIL, data_parallel(RAIL), 1 << 26),
    ("data-parallel on a fat-tree", FAT_TREE, data_parallel(FAT_TREE), 1 << 26),
    ("data-parallel over two pods", TWO_PODS, data_parallel(TWO_PODS), 3 << 20),
    ("tensor-parallel inside nodes", RAIL, tensor_parallel(RAIL, 8, True), 1 << 24),
    ("tensor-parallel across nodes", RAIL, tensor_parallel(RAIL, 8, False), 1 << 24),
    ("tensor-parallel across nodes on a fat-tree", FAT_TREE, tensor_parallel(FAT_TREE, 4, False), 1 << 24),
    ("groups of one and of three, out of order", RAIL, [[5], [9, 2, 40], [63, 0]], 999),
    # sizes that are no power of two and differ: rail 5 over 5 of the 8 nodes out of order, 6
    # GPUs of node 2 out of order, 7 GPUs over nodes and rails
    (
        "groups of 5, 6 and 7: a rail, a node other than node 0, a scattered set",
        RAIL,
        [[13, 5, 29, 21, 45], [18, 16, 23, 17, 20, 19], [62, 1, 33, 24, 58, 10, 47]],
        3 << 20,
    ),
    ("groups of 3 and 5 on a fat-tree, across leaves", FAT_TREE, [[40, 3, 17], [63, 8, 30, 55, 36]], 5 << 10),
    ("an empty buffer", RAIL, data_parallel(RAIL), 0),
]


def simulated_loads(cluster: Cluster, groups: list[list[int]], nbytes: int) -> dict[str, float]:
    totals = dict.fromkeys(("nvlink", "nic", "spine"), 0.0)
    for group in groups:
        if len(group) > 1:
            for kind, value in simulate(cluster, reference.ring(group, nbytes)).bytes_by_class().items():
                totals[kind] += value
    return totals


@pytest.mark.points(8)
def test_link_loads_equal_the_simulators_bytes_per_link_class(submission):
    got = submission.script([Step("link_loads", (c, groups, n)) for _, c, groups, n in CASES]).steps[0]
    for (what, cluster, groups, nbytes), loads in zip(CASES, got):
        want = simulated_loads(cluster, groups, nbytes)
        assert isinstance(loads, dict) and set(loads) == set(want), (
            f"{what}: expected keys {sorted(want)}, got {loads!r}"
        )
        for kind in want:
            assert math.isclose(loads[kind], want[kind], rel_tol=1e-9, abs_tol=1e-6), (
                f"{what}: {kind} carries {loads[kind]:.0f} bytes, the simulator counts {want[kind]:.0f} "
                f"(a message counts once on every link of cluster.path)"
            )


def test_rails_keep_data_parallel_traffic_off_the_spine_and_tensor_parallel_inside_a_node_off_the_network(submission):
    rail = submission.function("link_loads")(RAIL, data_parallel(RAIL), 1 << 20)
    fat = submission.function("link_loads")(FAT_TREE, data_parallel(FAT_TREE), 1 << 20)
    inside = submission.function("link_loads")(RAIL, tensor_parallel(RAIL, 8, True), 1 << 20)
    assert rail["spine"] == 0 and fat["spine"] > 0, (
        f"data-parallel rings: rail-optimised spine {rail['spine']:.0f} B (expected 0: same rail, one leaf), "
        f"fat-tree spine {fat['spine']:.0f} B (expected > 0: 4 nodes per leaf)"
    )
    assert inside["nic"] == inside["spine"] == 0 and inside["nvlink"] > 0, f"tensor-parallel inside a node: {inside}"


REFUSALS = [
    ((RAIL, [[0, 64]], 1024), "a GPU the cluster lacks"),
    ((RAIL, [[64]], 1024), "a lone GPU one past the last"),
    ((RAIL, [[-1]], 1024), "a lone negative GPU id"),
    ((RAIL, [[0, 1], [1, 2]], 1024), "a GPU in two groups"),
    ((RAIL, [[0, 1, 0]], 1024), "a GPU twice in one group"),
    ((RAIL, [[0, 1]], -1), "nbytes < 0"),
    (
        (Cluster.h100_cluster(2, topology="rail_only"), [[0, 9]], 1024),
        "another rail of another node on a rail-only cluster",
    ),
]


@pytest.mark.points(2)
@pytest.mark.parametrize(("args", "why"), REFUSALS, ids=[w for _, w in REFUSALS])
def test_bad_input_raises_value_error(submission, args, why):
    """ValueError, or the simulator's ScheduleError (a ValueError) for a path the topology lacks."""
    try:
        returned = submission.function("link_loads")(*args)
    except SubmissionError as caught:
        error = caught
    else:
        pytest.fail(f"link_loads with {why}: expected ValueError, it returned {returned!r}")
    if error.kind != "exception":
        raise error
    assert error.exception_type in ("ValueError", "ScheduleError"), (
        f"link_loads with {why}: expected ValueError, got:\n{error.message}"
    )
