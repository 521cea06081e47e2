"""fully_shard that frees the gathered vector after forward but leaves the layer's weight and bias pointing at it: no byte is held (the storage is emptied), yet every layer keeps tensors with no memory behind them, where the docstring asks to drop every reference to the gathered vector."""

# ruff: noqa: E501, F821 - a fragment appended to a solution file, whose names are in scope
# target: fsdp.py
# select: no_parameter_tensor or (training_matches_one_process and plain and adamw)
# fails: test_fully_shard_leaves_no_parameter_tensor_on_the_layers_after_forward_and_backward
# kind:
# message: still hold inp\.weight \(an attribute\): a Tensor


_set_parameters = _ShardedLayer.set_parameters


def _never_removes_the_views(self, full):
    if full is not None:  # after the layer ran: its weight and bias stay views of the freed vector
        _set_parameters(self, full)


_ShardedLayer.set_parameters = _never_removes_the_views
