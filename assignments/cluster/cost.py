# Your working copy: replace every `raise NotImplementedError` with your implementation.
# (Generated from the course's reference by `python -m grader sync`.)
"""What nccl-tests reports, and which all-reduce algorithm to run (lecture 13-the-cluster,
sections 6 and 7).

The two-level alpha-beta model. On a cluster of n nodes of g GPUs (P = g n), for a buffer of N
bytes:
    alpha_nv = nvlink_latency_s                       B_nv  = nvlink_GBps * 1e9   (bytes/s)
    alpha_net = nic_latency_s + 3 * switch_latency_s  B_net = nic_Gbps * 1e9 / 8 * nics_per_node / g
(the network as if every path crossed the spine; B_net is one GPU's share of its node's NICs).
A step of an algorithm costs alpha + (bytes one GPU sends in it) / B, with the network's alpha
and B when its transfers cross nodes and NVLink's otherwise:

    ring          2(P-1) steps of N/P            (network's when n > 1)
    hierarchical  2(g-1) NVLink steps of N/g + 2(n-1) network steps of N/(g n)
    double_binary_tree   2 floor(log2 P) steps, each alpha + message_s + N / B (two halves
                  meet on one link: a parent hears its two children, or a GPU sends in both trees)
                  (network's when n > 1)
    recursive_halving_doubling   for k = 0 .. log2 P - 1: 2 steps of N / 2^(k+1), the network's
                  when the partner distance P / 2^(k+1) >= g (P a power of two only)
"""

from __future__ import annotations

from grader.models.cluster import Cluster

ALGORITHMS = ("ring", "hierarchical", "double_binary_tree", "recursive_halving_doubling")

# nccl-tests' bus bandwidth factors (doc/PERFORMANCE.md): busbw = algbw * factor(n)
BUS_FACTORS = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
    "sendrecv": lambda n: 1.0,
}


def bus_bandwidth(op: str, nbytes: float, seconds: float, n: int) -> tuple[float, float]:
    """(algbw, busbw) in GB/s (1e9 bytes per second) exactly as nccl-tests reports them for an
    operation `op` of `nbytes` bytes (S, the size column of nccl-tests: for reduce_scatter and
    all_gather the whole array, n times one rank's part) that took `seconds` on `n` ranks:
    algbw = S / t, busbw = algbw * factor, factor 2(n-1)/n for all_reduce; (n-1)/n for
    reduce_scatter, all_gather and all_to_all; 1 for broadcast, reduce and sendrecv.
    An empty operation (nbytes = 0) has bandwidths 0. Raises ValueError for another op, nbytes < 0,
    seconds <= 0, or n that is not an int >= 1 (a float such as 8.0 is not an int, nor is a bool).
    """
    raise NotImplementedError("implement bus_bandwidth (lectures/13-the-cluster.md, section 6)")


def predicted_time(algorithm: str, nbytes: float, cluster: Cluster) -> float:
    """Seconds of an all-reduce of `nbytes` over every GPU of `cluster` with `algorithm` (one
    of ALGORITHMS), by the two-level alpha-beta model of this file's docstring. One GPU: 0.
    Raises ValueError for another algorithm, nbytes < 0, and recursive_halving_doubling on a
    GPU count that is not a power of two.
    """
    raise NotImplementedError("implement predicted_time (lectures/13-the-cluster.md, section 7)")


def choose_algorithm(op: str, nbytes: float, cluster: Cluster) -> str:
    """The algorithm of ALGORITHMS with the smallest predicted_time for an all-reduce of
    `nbytes` over every GPU of `cluster` (recursive_halving_doubling only when the GPU count is
    a power of two); a tie goes to the one listed first in ALGORITHMS. The choice NCCL's tuner
    makes with its own model: trees or halving-doubling for small messages on many GPUs, a
    hierarchical ring for large ones.
    Raises ValueError for an op other than "all_reduce" and for nbytes < 0.
    """
    raise NotImplementedError("implement choose_algorithm (lectures/13-the-cluster.md, section 7)")
