"""fully_shard that gathers a layer's parameters and keeps them: training is right (the
reduce-scatter still shards the gradients) but every layer's full parameters stay resident."""
# target: fsdp.py


def sharded_forward(self, *args, **kwargs):
    self.full = _GatherLayer.apply(self.layer.flat_shard, self)
    self.set_parameters(self.full)
    return self.forward(*args, **kwargs)


_ShardedLayer.sharded_forward = sharded_forward
