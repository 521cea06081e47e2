"""With pp > 1 the first and last stages update their copies of the tied embedding apart: they drift."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: step.py
# select: test_one_step_on_a_world_of_8_equals_one_process and dp2-tp2-pp2-cp1
# fails: test_one_step_on_a_world_of_8_equals_one_process
# kind:
# message: token_embedding.weight after the step


def _sum_gradients(stage, groups, tied):
    _all_reduce_flat([p.grad for p in stage.parameters()], groups["dp-cp"])
