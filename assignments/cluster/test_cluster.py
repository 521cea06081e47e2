"""Public tests for the cluster module: run them while you work with

    pytest assignments/cluster          (add -s to see what your code prints)

Your functions run in worker processes, never inside pytest. Schedules come back as plain data
and are replayed here by the course's flow-level simulator (grader.models.cluster.simulate: read
it), which counts the bytes on every link and the makespan; collective_step runs a schedule for
real on a world of 4 gloo processes (2 "nodes" of 2) and is compared with dist.all_reduce. The
hidden suite checks every schedule on 4 and 8 ranks for sizes that do and do not divide, the
bytes per link class on clusters up to 1,024 GPUs, the latency terms, choose_algorithm against
the simulator from 8 to 16,384 GPUs, bus_bandwidth against nccl-tests, link_loads against the
simulator, and every refusal. `make grade` gives the score.
"""

from __future__ import annotations

import torch

from grader.models.cluster import Cluster, simulate
from grader.testing import assert_matches, expect_exception, generator


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
    cluster = Cluster(nodes=2, gpus_per_node=2, nvlink_GBps=450.0, nics_per_node=2, nic_Gbps=400.0)
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


def test_recursive_halving_doubling_refuses_six_gpus(submission):
    expect_exception(
        "ValueError", lambda: submission.function("recursive_halving_doubling_allreduce_schedule")(list(range(6)), 64)
    )
