"""The ring runs over GPU ids, not positions in `ranks` (GPU r sends chunk r to GPU (r + 1) % p): right for any order of 0..p-1, malformed for one rail's GPUs or node 1's."""

# ruff: noqa: E501, F821 - a fragment appended to a solution file, whose names are in scope
# target: schedules.py
# select: ring_allreduce_schedule and (test_schedules_over_any_gpu_ids or (test_schedule_run_on_real_ranks and 5))
# fails: test_schedule_run_on_real_ranks_equals_dist_all_reduce|test_schedules_over_any_gpu_ids
# kind: exception
# message: ScheduleError: step \d+: transfer .* must join two different GPUs of \[21, 4, 13, 30, 9\]


def ring_allreduce_schedule(ranks, nbytes):
    ranks = _check_ranks(ranks)
    _check_nbytes(nbytes)
    p = len(ranks)
    steps = []
    if p > 1:  # a student's ring that reads GPU ids as positions
        steps.append((p - 1, [(r, (r + 1) % p, r, r + 1, "reduce") for r in ranks]))
        steps.append((p - 1, [(r, (r + 1) % p, (r + 1) % p, (r + 1) % p + 1, "copy") for r in ranks]))
    return {"op": "all_reduce", "gpus": ranks, "nbytes": nbytes, "chunks": p, "steps": steps}
