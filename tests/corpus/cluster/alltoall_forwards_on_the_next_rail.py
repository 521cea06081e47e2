"""The all-to-all forwards node a's blocks for (b, l) to GPU (b, l+1), the next rail: blocks land astray."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: schedules.py
# select: test_hierarchical_alltoall_run_on_real_ranks_equals_all_to_all_single
# fails: test_hierarchical_alltoall_run_on_real_ranks_equals_all_to_all_single
# kind:
# message: dist\.all_to_all_single gives

_reference_alltoall = hierarchical_alltoall_schedule


def hierarchical_alltoall_schedule(cluster, nbytes):
    schedule = _reference_alltoall(cluster, nbytes)
    g = cluster.gpus_per_node
    inside, across = schedule["steps"]
    shifted = [(s, d - d % g + (d + 1) % g, a, b, k) for s, d, a, b, k in across[1]]
    return {**schedule, "steps": [inside, (1, shifted)]}
