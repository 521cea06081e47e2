"""Tree 1 of the double binary tree puts GPU p - 1 - ranks[i] at position i (the id mirrored), not ranks[p - 1 - i]: the same trees for any order of 0..p-1, GPUs outside the list for one rail."""

# ruff: noqa: E501, F821 - a fragment appended to a solution file, whose names are in scope
# target: schedules.py
# select: double_binary_tree and (test_schedules_over_any_gpu_ids or (test_schedule_run_on_real_ranks and 4))
# fails: test_schedule_run_on_real_ranks_equals_dist_all_reduce|test_schedules_over_any_gpu_ids
# kind: exception
# message: ScheduleError: step \d+: transfer .* must join two different GPUs of \[19, 3, 27, 11\]


def double_binary_tree_allreduce_schedule(ranks, nbytes):
    ranks = _check_ranks(ranks)
    _check_nbytes(nbytes)
    p = len(ranks)
    trees = [(0, ranks), (1, [p - 1 - r for r in ranks])]  # a student's mirror of the ids
    depth_of = [(i + 1).bit_length() - 1 for i in range(p)]
    steps_up, steps_down = [], []
    for d in range(max(depth_of), 0, -1):
        edges = [(at[i], at[(i - 1) // 2], c) for c, at in trees for i in range(1, p) if depth_of[i] == d]
        steps_up.append((1, [(child, parent, c, c + 1, "reduce") for child, parent, c in edges]))
        steps_down.insert(0, (1, [(parent, child, c, c + 1, "copy") for child, parent, c in edges]))
    return {"op": "all_reduce", "gpus": ranks, "nbytes": nbytes, "chunks": 2, "steps": steps_up + steps_down}
