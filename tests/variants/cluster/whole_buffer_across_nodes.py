"""The hierarchical all-reduce all-reduces the whole buffer inside the node, then the whole
buffer again across nodes on each rail: the sum is right, but every NIC carries
2(n-1)/n * N instead of N/g of it."""
# target: schedules.py


def hierarchical_allreduce_schedule(cluster, nbytes):
    g, n = cluster.gpus_per_node, cluster.nodes
    steps = []
    for rings in ([[k * g + i for i in range(g)] for k in range(n)], [[k * g + i for k in range(n)] for i in range(g)]):
        if len(rings[0]) > 1:
            p = len(rings[0])
            scatter = [(r[i], r[(i + 1) % p], i, i + 1, "reduce") for r in rings for i in range(p)]
            gather = [(r[i], r[(i + 1) % p], (i + 1) % p, (i + 1) % p + 1, "copy") for r in rings for i in range(p)]
            steps += [
                (p - 1, [(s, d, a * g * n // p, b * g * n // p, k) for s, d, a, b, k in scatter]),
                (p - 1, [(s, d, a * g * n // p, b * g * n // p, k) for s, d, a, b, k in gather]),
            ]
    return {"op": "all_reduce", "gpus": list(range(g * n)), "nbytes": nbytes, "chunks": g * n, "steps": steps}
