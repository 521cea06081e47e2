"""plan breaks ties in step time by memory (the lighter grid first), not in increasing (tp, cp, pp, dp)."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: plan.py
# select: plan_lists
# fails: test_plan_lists_grids_of_exactly_equal_step_time_in_increasing_tp_cp_pp_dp
# kind:
# message: ties go in increasing \(tp, cp, pp, dp\): expected them in the order \[\(1, 1, 1, 8\), \(1, 2, 1, 4\)


_reference_plan = plan


def plan(cfg, cluster, global_batch, seq_len, **options):
    # among grids that are equally fast, the one that needs the least memory first
    plans = _reference_plan(cfg, cluster, global_batch, seq_len, **options)
    return sorted(plans, key=lambda p: (p.step_seconds, p.memory_bytes))
