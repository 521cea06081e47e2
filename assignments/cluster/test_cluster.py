"""Public tests for the cluster module: run them while you work with

    pytest assignments/cluster          (add -s to see what your code prints)

Your functions run in worker processes, never inside pytest. Schedules come back as plain data
and are replayed here by the course's flow-level simulator (grader.models.cluster.simulate: read
it), which counts the bytes on every link and the makespan; collective_step runs a schedule for
real on a world of 4 gloo processes (2 "nodes" of 2, or two groups of 2 at once) and is compared
with dist.all_reduce or all_to_all_single. The hidden suite checks every schedule on 4 to 8
ranks for sizes that do and do not divide, over GPU lists that are not 0..p-1 (the GPUs of one
rail, of node 1, out of order, 3, 5, 6 or 7 GPUs), the bytes per link class on clusters up to
1,024 GPUs, the latency terms, choose_algorithm against the simulator from 8 to 16,384 GPUs and
its ties, bus_bandwidth against nccl-tests, link_loads against the simulator, and every refusal.
`make grade` gives the score.
"""

from __future__ import annotations

import torch

from grader.models.cluster import Cluster, simulate
from grader.sandbox import Group
from grader.testing import assert_matches, expect_exception, generator

# 2 nodes of 2 GPUs, one NIC per GPU on a rail-optimised fabric: GPUs 0, 2 on rail 0 and 1, 3 on rail 1
TWO_BY_TWO = Cluster(nodes=2, gpus_per_node=2, nvlink_GBps=450.0, nics_per_node=2, nic_Gbps=400.0)


def test_ring_schedule_sends_two_p_minus_one_chunks_per_gpu(submission):
    cluster = Cluster.dgx_h100()
    schedule = submission.function("ring_allreduce_schedule")(list(range(8)), 8 << 20)
    result = simulate(cluster, schedule)
    sent = result.link_bytes[("nvlink_out", 0)]
    assert sent == 2 * 7 / 8 * (8 << 20), (
        f"GPU 0 sent {sent:.0f} bytes over NVLink; a ring all-reduce sends 2(p-1)/p * N = {2 * 7 / 8 * (8 << 20):.0f}"
    )


def test_hierarchical_schedule_puts_one_gth_of_the_ring_on_each_nic(submission):
    cluster = Cluster.h100_cluster(nodes=4)
    n, g, nbytes = 4, 8, 64 << 20
    result = simulate(cluster, submission.function("hierarchical_allreduce_schedule")(cluster, nbytes))
    nic = result.link_bytes.get(("nic_out", 0, 0), 0.0)
    assert nic == 2 * (n - 1) / n * nbytes / g, (
        f"NIC 0 of node 0 sent {nic:.0f} bytes; expected 2(n-1)/n * N/g = {2 * (n - 1) / n * nbytes / g:.0f}: "
        f"reduce-scatter inside the node first, so that only N/g crosses the network per GPU"
    )
    assert result.bytes_by_class()["spine"] == 0, "the cross-node rings stay on their rail: nothing crosses the spine"


def test_schedules_on_four_ranks_equal_dist_all_reduce(submission, library):
    cluster = TWO_BY_TWO
    gen = generator("public-cluster")
    tensors = [torch.randn(7, 3, generator=gen, dtype=torch.float64) for _ in range(4)]
    expected = library.spmd("grader.library:all_reduce", 4, [(t.clone(),) for t in tensors]).outputs
    for name, args in (
        ("ring_allreduce_schedule", ([0, 1, 2, 3], 168)),
        ("hierarchical_allreduce_schedule", (cluster, 168)),
        ("double_binary_tree_allreduce_schedule", ([0, 1, 2, 3], 168)),
        ("recursive_halving_doubling_allreduce_schedule", ([0, 1, 2, 3], 168)),
    ):
        result = submission.function("collective_step").spmd(4, [(name, args, t) for t in tensors])
        for rank, got in enumerate(result.outputs):
            assert_matches(
                got,
                expected[rank],
                f"{name}: rank {rank}'s buffer after the schedule (dist.all_reduce's sum)",
                1e-12,
                1e-12,
            )


def test_two_rings_in_subgroups_of_a_world_of_four_each_sum_their_own_pair(submission):
    # one tensor-parallel group per node, {0, 1} and {2, 3}, all-reducing at the same time: each
    # group's ranks play GPUs 0 and 1 of the schedule (group ranks), and sum only their own buffers
    tensors = [torch.tensor([1.0, 2.0, 3.0]) * 10**r for r in range(4)]
    pairs = [(0, 1), (0, 1), (2, 3), (2, 3)]
    args = [("ring_allreduce_schedule", ([0, 1], 24), tensors[r], Group(pairs[r])) for r in range(4)]
    got = submission.function("collective_step").spmd(4, args).outputs
    for rank, pair in enumerate(pairs):
        want = tensors[pair[0]] + tensors[pair[1]]
        assert_matches(got[rank], want, f"rank {rank} in group {pair}: the sum of its group only, not the world's")


def test_hierarchical_alltoall_on_four_ranks_delivers_block_r_of_every_rank_to_rank_r(submission):
    # rank s sends block d = 10 s + d to rank d: rank d must end with 10 s + d from every s, in order of s
    tensors = [torch.tensor([10.0 * s + d for d in range(4)], dtype=torch.float64) for s in range(4)]
    args = [("hierarchical_alltoall_schedule", (TWO_BY_TWO, 32), t) for t in tensors]  # 4 float64: 32 bytes
    got = submission.function("collective_step").spmd(4, args).outputs
    for rank in range(4):
        want = torch.tensor([10.0 * s + rank for s in range(4)], dtype=torch.float64)
        assert_matches(got[rank], want, f"rank {rank}'s output (what dist.all_to_all_single gives)")
    schedule = submission.function("hierarchical_alltoall_schedule")(TWO_BY_TWO, 32)
    spine = simulate(TWO_BY_TWO, schedule).bytes_by_class()["spine"]
    assert spine == 0, f"{spine:.0f} bytes crossed the spine: step 2 must send only to the same local rank (rail)"


def test_bus_bandwidth_of_an_all_reduce_on_eight_gpus(submission):
    algbw, busbw = submission.function("bus_bandwidth")("all_reduce", 275e9, 1.0, 8)
    assert (algbw, busbw) == (275.0, 481.25), (
        f"expected (275.0, 481.25) GB/s (busbw = algbw * 2(n-1)/n), got {(algbw, busbw)}"
    )


def test_choose_algorithm_picks_halving_doubling_for_small_and_hierarchical_for_large(submission):
    cluster = Cluster.h100_cluster(nodes=128)
    choose = submission.function("choose_algorithm")
    small, large = choose("all_reduce", 4096, cluster), choose("all_reduce", 1 << 30, cluster)
    assert (small, large) == ("recursive_halving_doubling", "hierarchical"), (
        f"1,024 GPUs: expected recursive_halving_doubling for 4 KiB (latency: 2 log2 P steps) and hierarchical for "
        f"1 GiB (bandwidth: N/g per NIC), got {small} and {large}"
    )


def test_link_loads_count_every_ring_message_once_on_each_link_of_its_path(submission):
    # N = 1000: a ring of 2 sends N from each GPU to the other, a ring of 4 sends 2 * 3/4 * N = 1500.
    # A path inside a node is nvlink_out + nvlink_in; between nodes on one rail nic_out + nic_in;
    # across rails of two nodes nic_out, leaf_up, leaf_down, nic_in (TWO_BY_TWO.path(a, b) lists them).
    cases = [
        ("one group per node", [[0, 1], [2, 3]], {"nvlink": 8000.0, "nic": 0.0, "spine": 0.0}),
        ("one group per rail", [[0, 2], [1, 3]], {"nvlink": 0.0, "nic": 8000.0, "spine": 0.0}),
        ("pairs across rails", [[0, 3], [1, 2]], {"nvlink": 0.0, "nic": 8000.0, "spine": 8000.0}),
        ("a ring of 4, 0 -> 1 -> 3 -> 2 -> 0", [[0, 1, 3, 2]], {"nvlink": 6000.0, "nic": 6000.0, "spine": 0.0}),
    ]
    for what, groups, want in cases:
        got = submission.function("link_loads")(TWO_BY_TWO, groups, 1000)
        assert got == want, f"link_loads of {what} {groups}, 1000 bytes: expected {want}, got {got}"


def test_recursive_halving_doubling_refuses_six_gpus(submission):
    expect_exception(
        "ValueError", lambda: submission.function("recursive_halving_doubling_allreduce_schedule")(list(range(6)), 64)
    )
