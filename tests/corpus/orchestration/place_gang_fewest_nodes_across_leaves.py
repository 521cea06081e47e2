"""place_gang finds the fewest nodes (best fit among them) but never looks at the leaves: a
two-node job may sit under two leaves and send its ring over the spine."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: scheduler.py
# select: place_gang
# fails: test_place_gang_spans_the_fewest_leaves|test_place_gang_keeps_a_two_node_job_under_one_leaf
# kind:
# message: crosses the spine|expected \d+ leaves


def place_gang(free_gpus, pods, gpus_per_pod, cluster):
    _check_free(free_gpus, cluster)
    if not _whole(pods) or pods < 1:
        raise ValueError(f"pods must be an integer >= 1, not {pods!r}")
    if not _whole(gpus_per_pod) or not 1 <= gpus_per_pod <= cluster.gpus_per_node:
        raise ValueError(f"gpus_per_pod must be an integer in 1 .. {cluster.gpus_per_node}, not {gpus_per_pod!r}")
    slots = [free // gpus_per_pod for free in free_gpus]
    nodes = [node for node in range(cluster.nodes) if slots[node]]
    best = _cover_within_leaf(nodes, slots, free_gpus, pods)  # every node as if under one leaf
    if pods not in best:
        return None
    placement, left = [], pods
    for node in sorted(best[pods][2], key=lambda n: (-slots[n], n)):
        take = min(slots[node], left)
        placement += [node] * take
        left -= take
    return sorted(placement)
