"""fully_shard that frees the gathered vector after forward but leaves the layer's weight and bias pointing at it: no byte is held (the storage is emptied), yet every layer keeps tensors with no memory behind them, where the docstring asks to drop every reference to the gathered vector."""

# ruff: noqa: E501, F821 - a fragment appended to a solution file, whose names are in scope
# target: fsdp.py
# select: no_parameter_tensor or (training_matches_one_process and plain and adamw)
# fails: test_fully_shard_leaves_no_parameter_tensor_on_the_layers_after_forward_and_backward
# kind:
# message: still hold inp\.weight \(an attribute\): a Tensor


def _forward_keeping_the_views(self, *args, **kwargs):
    args, kwargs = [self.cast(a) for a in args], {k: self.cast(v) for k, v in kwargs.items()}
    self.full = _GatherLayer.apply(self.layer.flat_shard, self)
    self.set_parameters(self.full)
    with torch.autograd.graph.saved_tensors_hooks(self.pack, self.unpack):
        out = self.forward(*args, **kwargs)
    _free(self.full)
    self.full = None
    return out


_ShardedLayer.sharded_forward = _forward_keeping_the_views
