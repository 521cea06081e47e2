"""A gang placed without looking at the topology: each pod on the node with the most free GPUs
(the default scheduler's LeastAllocated score), spreading a job over nodes and leaves. All or
nothing still holds; its rings cross NICs and the spine that a packed placement avoids."""

# target: scheduler.py


def place_gang(free_gpus, pods, gpus_per_pod, cluster):
    _check_free(free_gpus, cluster)
    if not _whole(pods) or pods < 1:
        raise ValueError(f"pods must be an integer >= 1, not {pods!r}")
    if not _whole(gpus_per_pod) or not 1 <= gpus_per_pod <= cluster.gpus_per_node:
        raise ValueError(f"gpus_per_pod must be an integer in 1 .. {cluster.gpus_per_node}, not {gpus_per_pod!r}")
    free, placement = list(free_gpus), []
    for _ in range(pods):
        node = max(range(cluster.nodes), key=lambda n: (free[n], -n))
        if free[node] < gpus_per_pod:
            return None
        free[node] -= gpus_per_pod
        placement.append(node)
    return sorted(placement)
