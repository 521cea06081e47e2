"""The hidden suite's own schedules and closed forms, written apart from the solutions: each
schedule is built from "who sends what to whom in which step" tables, so that the simulator's
figures of a submission can be compared with those of a schedule known to be right."""

from __future__ import annotations

from functools import cache

from grader.models.cluster import Cluster, simulate


def _schedule(op: str, gpus: list[int], nbytes: int, chunks: int, steps: list) -> dict:
    return {"op": op, "gpus": list(gpus), "nbytes": nbytes, "chunks": chunks, "steps": [s for s in steps if s[1]]}


def ring(gpus: list[int], nbytes: int) -> dict:
    """Reduce-scatter then all-gather around gpus in list order, one chunk per GPU."""
    p = len(gpus)
    hops = [(gpus[i], gpus[(i + 1) % p]) for i in range(p)] if p > 1 else []
    scatter = [(s, d, i, i + 1, "reduce") for i, (s, d) in enumerate(hops)]
    gather = [(s, d, (i + 1) % p, (i + 1) % p + 1, "copy") for i, (s, d) in enumerate(hops)]
    return _schedule("all_reduce", gpus, nbytes, max(p, 1), [(p - 1, scatter), (p - 1, gather)])


def hierarchical(cluster: Cluster, nbytes: int) -> dict:
    """Node rings over chunk groups, rail rings over the nodes, node rings again."""
    g, n = cluster.gpus_per_node, cluster.nodes
    node_ring = [(k * g + i, k * g + (i + 1) % g, i) for k in range(n) for i in range(g)]  # (src, dst, local rank)
    rail_ring = [(k * g + i, ((k + 1) % n) * g + i, k, i) for k in range(n) for i in range(g)]

    def owned(i: int) -> int:  # the chunk group a GPU of local rank i ends phase 1 with
        return (i + 1) % g

    def one(first: int, kind: str) -> tuple[int, int, str]:
        return first, first + 1, kind

    steps = []
    if g > 1:
        steps.append((g - 1, [(s, d, i * n, i * n + n, "reduce") for s, d, i in node_ring]))
    if n > 1:
        steps.append((n - 1, [(s, d, *one(owned(i) * n + k, "reduce")) for s, d, k, i in rail_ring]))
        steps.append((n - 1, [(s, d, *one(owned(i) * n + (k + 1) % n, "copy")) for s, d, k, i in rail_ring]))
    if g > 1:
        steps.append((g - 1, [(s, d, owned(i) * n, owned(i) * n + n, "copy") for s, d, i in node_ring]))
    return _schedule("all_reduce", list(range(g * n)), nbytes, g * n, steps)


def double_binary_tree(gpus: list[int], nbytes: int) -> dict:
    """Heap-numbered trees: gpus in order carry chunk 0, reversed carry chunk 1."""
    p = len(gpus)
    levels = {}
    for position in range(1, p):
        levels.setdefault((position + 1).bit_length() - 1, []).append(position)
    up, down = [], []
    for depth in sorted(levels):
        edges = [(order[i], order[(i - 1) // 2], c) for c, order in ((0, gpus), (1, gpus[::-1])) for i in levels[depth]]
        up.insert(0, (1, [(child, parent, c, c + 1, "reduce") for child, parent, c in edges]))
        down.append((1, [(parent, child, c, c + 1, "copy") for child, parent, c in edges]))
    return _schedule("all_reduce", gpus, nbytes, 2, up + down)


def halving_doubling(gpus: list[int], nbytes: int) -> dict:
    """Rabenseifner: halving with the farthest partner first, doubling back in reverse."""
    p = len(gpus)
    ranges = {i: (0, p) for i in range(p)}
    halving, distances = [], [p >> (k + 1) for k in range(p.bit_length() - 1)]
    for d in distances:
        transfers, after = [], {}
        for i, (lo, hi) in ranges.items():
            mid = (lo + hi) // 2
            low = i & d == 0
            after[i] = (lo, mid) if low else (mid, hi)
            transfers.append((gpus[i], gpus[i ^ d], *((mid, hi) if low else (lo, mid)), "reduce"))
        halving.append((1, transfers))
        ranges = after
    doubling = []
    for d in reversed(distances):
        doubling.append((1, [(gpus[i], gpus[i ^ d], *ranges[i], "copy") for i in range(p)]))
        ranges = {i: (min(ranges[i][0], ranges[i ^ d][0]), max(ranges[i][1], ranges[i ^ d][1])) for i in range(p)}
    return _schedule("all_reduce", gpus, nbytes, p, halving + doubling)


def hierarchical_alltoall(cluster: Cluster, nbytes: int) -> dict:
    """Gather per destination local rank inside the node, then one message per rail and node pair."""
    g, n = cluster.gpus_per_node, cluster.nodes
    p = g * n
    gpu = lambda node, local: node * g + local  # noqa: E731
    inside, across = [], []
    for a in range(n):
        for i in range(g):
            for j in range(g):
                for b in range(n):
                    if j != i:  # (a, i)'s blocks for local rank j of node b go to (a, j)
                        block = gpu(a, i) * p + gpu(b, j)
                        inside.append((gpu(a, i), gpu(a, j), block, block + 1, "copy"))
                    if b != a:  # (a, i) forwards node a's blocks for (b, i)
                        block = gpu(a, j) * p + gpu(b, i)
                        across.append((gpu(a, i), gpu(b, i), block, block + 1, "copy"))
    return _schedule("all_to_all", list(range(p)), nbytes, p * p, [(1, inside), (1, across)])


ALGORITHMS = ("ring", "hierarchical", "double_binary_tree", "recursive_halving_doubling")


def reference_schedule(algorithm: str, cluster: Cluster, nbytes: int) -> dict:
    gpus = list(range(cluster.num_gpus))
    if algorithm == "hierarchical":
        return hierarchical(cluster, nbytes)
    return {"ring": ring, "double_binary_tree": double_binary_tree, "recursive_halving_doubling": halving_doubling}[
        algorithm
    ](gpus, nbytes)


@cache
def simulated(algorithm: str, cluster: Cluster):
    """The simulator's result of the reference schedule (its makespan_for gives every size)."""
    return simulate(cluster, reference_schedule(algorithm, cluster, 1 << 20))


def model(algorithm: str, nbytes: float, cluster: Cluster) -> float:
    """cost.py's two-level alpha-beta model, written from its docstring's table."""
    g, n = cluster.gpus_per_node, cluster.nodes
    p = g * n
    a_nv, b_nv = cluster.nvlink_latency_s, cluster.nvlink_GBps * 1e9
    a_net = cluster.nic_latency_s + 3 * cluster.switch_latency_s
    b_net = cluster.nic_Gbps * 1e9 / 8 * cluster.nics_per_node / g
    a_all, b_all = (a_net, b_net) if n > 1 else (a_nv, b_nv)
    if algorithm == "ring":
        return 2 * (p - 1) * (a_all + nbytes / p / b_all)
    if algorithm == "hierarchical":
        return 2 * (g - 1) * (a_nv + nbytes / g / b_nv) + 2 * (n - 1) * (a_net + nbytes / (g * n) / b_net)
    if algorithm == "double_binary_tree":
        return 2 * (p.bit_length() - 1) * (a_all + cluster.message_s + nbytes / b_all)
    total, half = 0.0, nbytes
    for d in (p >> (k + 1) for k in range(p.bit_length() - 1)):
        half /= 2
        alpha, bandwidth = (a_net, b_net) if d >= g else (a_nv, b_nv)
        total += 2 * (alpha + half / bandwidth)
    return total
