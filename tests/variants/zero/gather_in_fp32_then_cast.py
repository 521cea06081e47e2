"""fully_shard(compute_dtype=...) that all-gathers the fp32 shards and casts the gathered layer
afterwards: training and gradients are the same (the cast of a gathered value is the gathered
cast), but while a layer runs a rank holds it in fp32 AND in compute_dtype, three times the
bytes of one compute_dtype copy, and sends twice the bytes over the wire."""
# target: fsdp.py


def gather(self):
    shard = self.layer.flat_shard.detach()
    full = shard.new_empty(shard.numel() * self.world_size)
    dist.all_gather_into_tensor(full, shard)
    return full.to(self.compute_dtype or shard.dtype)


_ShardedLayer.gather = gather
