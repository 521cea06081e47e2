"""Gradients are summed over the "dp" group only: the context-parallel ranks, which saw other positions, drift apart."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: step.py
# select: test_one_step_on_a_world_of_8_equals_one_process and dp2-tp2-pp1-cp2
# fails: test_one_step_on_a_world_of_8_equals_one_process
# kind:
# message: after the step


def _sum_gradients(stage, groups, tied):
    if tied:
        dist.all_reduce(stage.token_embedding.weight.grad, group=groups["embedding"])
    _all_reduce_flat([p.grad for p in stage.parameters()], groups["dp"])
