"""fully_shard that drops its own references to the gathered parameters after forward but lets
autograd save them for backward (no re-gather): the tensors autograd saves keep every layer's
full parameters alive until backward, and the count sees them there."""
# target: fsdp.py


def sharded_forward(self, *args, **kwargs):
    full = _GatherLayer.apply(self.layer.flat_shard, self)
    self.set_parameters(full)
    out = self.forward(*args, **kwargs)
    self.set_parameters(None)
    return out


_ShardedLayer.sharded_forward = sharded_forward
