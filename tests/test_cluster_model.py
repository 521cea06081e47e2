"""The given code of module cluster (grader/models/cluster.py) keeps its promises: the presets,
the paths and their latencies, max-min fair sharing on cases worked by hand, the barrier
between steps, repeated steps passing on what they received, a repeated step computed once
(counted, so that 16,384 GPUs stay cheap), all-to-all blocks of N/P, and every refusal. The
executor (run_schedule) is proved on real ranks by grading the solutions: the hidden suite runs
every schedule through it against torch.distributed.all_reduce and all_to_all_single."""

from __future__ import annotations

import math

import pytest

from grader.models import cluster as model
from grader.models.cluster import Cluster, ScheduleError, simulate

NODE = Cluster(nodes=1, gpus_per_node=4, nvlink_GBps=100.0, nics_per_node=4, nic_Gbps=800.0, message_s=0.0)
TWO = Cluster(nodes=2, gpus_per_node=2, nvlink_GBps=100.0, nics_per_node=2, nic_Gbps=800.0, message_s=0.0)


def schedule(steps: list, gpus: list[int], nbytes: int, chunks: int, op: str = "all_reduce") -> dict:
    return {"op": op, "gpus": gpus, "nbytes": nbytes, "chunks": chunks, "steps": steps}


def test_presets_are_dgx_h100_nodes():
    node = Cluster.dgx_h100()
    assert (node.gpus_per_node, node.nvlink_GBps, node.nics_per_node, node.nic_Gbps) == (8, 450.0, 8, 400.0)
    assert node.nic_bytes_per_s == 50e9 and node.nvlink_bytes_per_s == 450e9
    big = Cluster.h100_cluster(64, topology="fat_tree", oversubscription=2.0)
    assert big.num_gpus == 512 and big.topology == "fat_tree" and big.oversubscription == 2.0


def test_paths_and_latencies_follow_the_topology():
    rail = Cluster.h100_cluster(64)  # two pods of 32 nodes
    assert [model.link_class(link) for link in rail.path(0, 1)] == ["nvlink", "nvlink"]
    assert rail.latency(0, 1) == rail.nvlink_latency_s
    assert [model.link_class(link) for link in rail.path(0, 8)] == ["nic", "nic"]  # same rail, same pod
    assert rail.latency(0, 8) == rail.nic_latency_s + rail.switch_latency_s
    assert [model.link_class(link) for link in rail.path(0, 9)] == ["nic", "spine", "spine", "nic"]  # another rail
    assert [model.link_class(link) for link in rail.path(0, 32 * 8)] == ["nic", "spine", "spine", "nic"]  # another pod
    assert rail.latency(0, 9) == rail.nic_latency_s + 3 * rail.switch_latency_s
    fat = Cluster.h100_cluster(8, topology="fat_tree")  # 4 nodes of 8 NICs per 32-port leaf
    assert "spine" not in [model.link_class(link) for link in fat.path(0, 3 * 8 + 5)]
    assert "spine" in [model.link_class(link) for link in fat.path(0, 4 * 8)]
    assert rail.bandwidth(0, 1) == 450e9 and rail.bandwidth(0, 9) == 50e9


def test_a_rail_only_cluster_refuses_another_rail_of_another_node():
    rail_only = Cluster.h100_cluster(4, topology="rail_only")
    assert rail_only.path(0, 3 * 8) == [("nic_out", 0, 0), ("nic_in", 3, 0)]
    with pytest.raises(ScheduleError, match="rail-only"):
        rail_only.path(0, 3 * 8 + 1)
    with pytest.raises(ScheduleError, match="rail-only"):
        simulate(rail_only, schedule([(1, [(0, 9, 0, 1, "copy")])], list(range(32)), 8, 1))


def test_max_min_fair_sharing_worked_by_hand():
    """GPU 0 sends 2 messages (to 1 and 2): they share its NVLink out at 50 GB/s each; GPU 3's
    message to 2 shares 2's NVLink in with 0's: max-min gives 0->1 the rest once 0->2 is bound.
    All links 100 GB/s: 0->2 and 3->2 get 50 each (2's in-link), so 0->1 gets 50 (0's out-link)."""
    steps = [(1, [(0, 1, 0, 1, "copy"), (0, 2, 0, 1, "copy"), (3, 2, 1, 2, "copy")])]
    result = simulate(NODE, schedule(steps, [0, 1, 2, 3], 200_000_000, 2))  # 100 MB a chunk
    assert math.isclose(result.makespan, NODE.nvlink_latency_s + 100e6 / 50e9)
    assert result.link_bytes[("nvlink_out", 0)] == 200e6 and result.link_bytes[("nvlink_in", 2)] == 200e6


def test_a_message_that_finishes_frees_its_share():
    """0 -> 1 carries 1 chunk, 0 -> 2 carries 3 (100 MB a chunk): both at 50 GB/s until the first
    is done (2 ms), then the second alone at 100 GB/s for its last 2 chunks (2 ms more)."""
    steps = [(1, [(0, 1, 0, 1, "copy"), (0, 2, 1, 4, "copy")])]
    result = simulate(NODE, schedule(steps, [0, 1, 2, 3], 400_000_000, 4))
    assert math.isclose(result.makespan, NODE.nvlink_latency_s + 100e6 / 50e9 + 200e6 / 100e9)


def test_steps_are_separated_by_a_barrier_and_messages_cost_their_posting():
    cluster = Cluster(nodes=1, gpus_per_node=4, nvlink_GBps=100.0, nics_per_node=1, nic_Gbps=100.0, message_s=1e-6)
    one = [(0, 1, 0, 1, "copy"), (0, 2, 0, 1, "copy"), (0, 3, 0, 1, "copy")]
    result = simulate(cluster, schedule([(1, one), (1, [(1, 2, 0, 1, "copy")])], [0, 1, 2, 3], 0, 1))
    assert math.isclose(result.makespan, (cluster.nvlink_latency_s + 2e-6) + cluster.nvlink_latency_s)
    assert result.steps == [(1, pytest.approx(cluster.nvlink_latency_s + 2e-6)), (1, cluster.nvlink_latency_s)]


def test_a_repeated_step_passes_on_what_each_gpu_received():
    """Chunks of unequal size: a ring whose GPUs start with 1, 2 and 3 chunks; each later time
    every GPU sends what it got, so every GPU sends every size once over three repeats."""
    ring = [(0, 1, 0, 1, "copy"), (1, 2, 1, 3, "copy"), (2, 0, 3, 6, "copy")]
    cluster = Cluster(nodes=1, gpus_per_node=3, nvlink_GBps=100.0, nics_per_node=1, nic_Gbps=100.0, message_s=0.0)
    result = simulate(cluster, schedule([(3, ring)], [0, 1, 2], 600, 6))
    assert all(result.link_bytes[("nvlink_out", gpu)] == 600 for gpu in range(3))
    assert math.isclose(result.makespan, 3 * (cluster.nvlink_latency_s + 300 / 100e9))


def test_a_repeated_step_whose_repeats_are_alike_is_computed_once(monkeypatch):
    """16,384 GPUs: the flat ring's 32,766 steps of 16,384 messages are two fluid computations."""
    calls = []
    original = model._fluid_seconds
    monkeypatch.setattr(model, "_fluid_seconds", lambda *args: calls.append(1) or original(*args))
    p = 16384
    ring = [(i, (i + 1) % p, i, i + 1, "reduce") for i in range(p)]
    gather = [(i, (i + 1) % p, (i + 1) % p, (i + 1) % p + 1, "copy") for i in range(p)]
    cluster = Cluster.h100_cluster(p // 8)
    result = simulate(cluster, schedule([(p - 1, ring), (p - 1, gather)], list(range(p)), 1 << 30, p))
    assert len(calls) == 2
    assert math.isclose(result.link_bytes[("nvlink_out", 0)], 2 * (p - 1) / p * (1 << 30))
    assert math.isclose(result.makespan_for(1 << 30), result.makespan)
    assert result.makespan_for(0) < result.makespan


def test_all_to_all_blocks_are_n_over_p():
    p, nbytes = 4, 4096
    flat = [(s, d, s * p + d, s * p + d + 1, "copy") for s in range(p) for d in range(p) if s != d]
    result = simulate(TWO, schedule([(1, flat)], list(range(p)), nbytes, p * p, "all_to_all"))
    assert result.link_bytes[("nvlink_out", 0)] == nbytes / p  # to GPU 1, its node peer
    assert result.link_bytes[("nic_out", 0, 0)] == 2 * nbytes / p  # to GPUs 2 and 3


COPY = (0, 1, 0, 1, "copy")


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ([1, 2], "a dict"),
        ({"op": "all_reduce"}, "has no gpus"),
        (schedule([], [0, 1], 8, 1, "gather"), "op 'gather'"),
        (schedule([], [0, 0], 8, 1), "name a GPU twice"),
        (schedule([], [0, 1], -1, 1), "nbytes"),
        (schedule([], [0, 1], 8, 0), "chunks"),
        (schedule([], [0, 1], 8, 3, "all_to_all"), "4 chunks"),
        (schedule([(0, [(0, 1, 0, 1, "copy")])], [0, 1], 8, 1), "repeat >= 1"),
        (schedule([(1, [])], [0, 1], 8, 1), "no transfers"),
        (schedule([(1, [(0, 1, 0, 1, "add")])], [0, 1], 8, 1), "'reduce' | 'copy'"),
        (schedule([(1, [(0, 2, 0, 1, "copy")])], [0, 1], 8, 1), "two different GPUs"),
        (schedule([(1, [(0, 0, 0, 1, "copy")])], [0, 1], 8, 1), "two different GPUs"),
        (schedule([(1, [(0, 1, 1, 1, "copy")])], [0, 1], 8, 2), "chunks 1..0"),
        (schedule([(2, [(0, 1, 0, 1, "copy")])], [0, 1], 8, 1), "receives 0 of its transfers"),
        (schedule([(1, [(0, 4, 0, 1, "copy")])], [0, 4], 8, 1), "the cluster has 4"),
        (schedule([(10**9, [(0, 1, 0, 1, "copy"), (1, 0, 1, 3, "copy")])], [0, 1], 8, 3), "different sizes"),
        # 1 + 10,000,000 transfers: the second step's length takes the total over, before its transfers are read
        (schedule([(1, [COPY]), (1, [COPY] * 10_000_000)], [0, 1], 8, 1), "more than 10,000,000"),
    ],
)
def test_a_malformed_schedule_is_refused_with_what_is_wrong(bad, message):
    with pytest.raises(ScheduleError, match=message.replace("(", r"\(").replace("|", r"\|")):
        simulate(NODE, bad)


def test_a_cluster_with_impossible_fields_is_refused():
    with pytest.raises(ValueError, match="nodes"):
        Cluster(nodes=0, gpus_per_node=8, nvlink_GBps=450.0, nics_per_node=8, nic_Gbps=400.0)
    with pytest.raises(ValueError, match="topology"):
        Cluster(nodes=1, gpus_per_node=8, nvlink_GBps=450.0, nics_per_node=8, nic_Gbps=400.0, topology="torus")
    with pytest.raises(ValueError, match="at most one NIC per GPU"):
        Cluster(nodes=1, gpus_per_node=2, nvlink_GBps=450.0, nics_per_node=4, nic_Gbps=400.0)
    with pytest.raises(ValueError, match="nic_Gbps"):
        Cluster(nodes=1, gpus_per_node=2, nvlink_GBps=450.0, nics_per_node=2, nic_Gbps=-1.0)
