"""The MLP adds its output bias before the tensor-parallel sum, so tp ranks add it tp times."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: model.py
# select: test_one_step_on_a_world_of_8_equals_one_process and dp2-tp2-pp2-cp1
# fails: test_one_step_on_a_world_of_8_equals_one_process
# kind:
# message: after the step


def _mlp_bias_first(self, mlp, x):
    x = copy_to_tp_region(x, self.tp_group)
    return reduce_from_tp_region(mlp[2](F.gelu(mlp[0](x))), self.tp_group)


_Stage._mlp = _mlp_bias_first
