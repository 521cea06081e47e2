"""The ring's all-gather adds each complete chunk ("reduce") instead of copying it: sums come out too large."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: schedules.py
# select: test_schedule_run_on_real_ranks_equals_dist_all_reduce and ring and 4
# fails: test_schedule_run_on_real_ranks_equals_dist_all_reduce
# kind:
# message: vs dist\.all_reduce

_reference_ring = ring_allreduce_schedule


def ring_allreduce_schedule(ranks, nbytes):
    schedule = _reference_ring(ranks, nbytes)
    steps = [
        (repeat, [(s, d, a, b, "reduce") for s, d, a, b, _ in transfers]) for repeat, transfers in schedule["steps"]
    ]
    return {**schedule, "steps": steps}
