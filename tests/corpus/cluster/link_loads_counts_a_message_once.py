"""link_loads adds each ring message once to the class of its first link, not to every link it crosses."""

# ruff: noqa: E501, F821 - a fragment appended to a solution file, whose names are in scope
# target: loads.py
# select: link_loads
# fails: test_link_loads_equal_the_simulators_bytes_per_link_class|test_link_loads_count_every_ring_message_once_on_each_link_of_its_path
# kind:
# message: the simulator counts|link_loads of one group per node [^\n]*: expected \{'nvlink': 8000


def link_loads(cluster, groups, nbytes):
    if nbytes < 0:
        raise ValueError("nbytes must be >= 0")
    seen = [gpu for group in groups for gpu in group]
    if len(set(seen)) != len(seen) or any(not 0 <= gpu < cluster.num_gpus for gpu in seen):
        raise ValueError("a GPU outside the cluster or in two groups")
    loads = {"nvlink": 0.0, "nic": 0.0, "spine": 0.0}
    for group in groups:
        p = len(group)
        for i in range(p if p > 1 else 0):
            loads[link_class(cluster.path(group[i], group[(i + 1) % p])[0])] += 2 * (p - 1) / p * nbytes
    return loads
