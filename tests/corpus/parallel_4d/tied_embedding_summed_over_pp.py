"""The tied embedding's gradient is summed over "pp": with pp = 3 the middle stage never joins, the ends hang."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: step.py
# select: test_one_step_with_three_pipeline_stages_equals_one_process and dp1-tp2-pp3-cp1
# fails: test_one_step_with_three_pipeline_stages_equals_one_process
# kind: deadlock
# message: all_reduce


def _sum_gradients(stage, groups, tied):
    # "the first and the last stage of each pp group": right with pp = 2, where they are the
    # whole "pp" group; with pp = 3 the middle stage is in that group and never reduces.
    if tied:
        dist.all_reduce(stage.token_embedding.weight.grad, group=groups["pp"])
    _all_reduce_flat([p.grad for p in stage.parameters()], groups["dp-cp"])
