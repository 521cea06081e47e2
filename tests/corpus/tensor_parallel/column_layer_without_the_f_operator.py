"""ColumnParallelLinear that multiplies x directly, without copy_to_tp_region (the f operator): forward is right, but x's gradient is only this rank's part, never all-reduced; the failure names the missing all-reduce, not the wrong gradient it causes."""

# ruff: noqa: E501, F821 - a fragment appended to a solution file, whose names are in scope
# target: layers.py
# select: parallel_linear_matches
# fails: parallel_linear_matches_nn_linear_on_the_whole_weight\[column-gather_output=False-bias-world=2\]|parallel_linear_matches_nn_linear_on_the_whole_weight\[column-gather_output=True-bias-world=2\]
# kind:
# message: column-gather_output=(False|True)-bias-world=2, rank 0: backward expected 1 all_reduce of 72 elements \(Megatron-Core's ColumnParallelLinear, gather_output=(False|True)\), got none: the input enters through copy_to_tp_region \(f\), whose backward all-reduces x's gradient


def _column_forward_without_f(self, x):
    if self.sequence_parallel:
        y = _SequenceParallelLinear.apply(x, self.weight, self.bias, self.group)
    else:
        y = F.linear(x, self.weight, self.bias)
    return _GatherLastDim.apply(y, self.group) if self.gather_output else y


ColumnParallelLinear.forward = _column_forward_without_f
