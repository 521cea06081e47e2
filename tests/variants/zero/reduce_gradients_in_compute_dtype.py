"""fully_shard(compute_dtype=...) that reduce-scatters the 16-bit gradient and casts the summed
shard to fp32 afterwards: flat_shard.grad is fp32, the memory is the same, but the sum over ranks
rounds to 16 bits (8 significant bits in bf16) where the recipe sums in fp32."""
# target: fsdp.py


def backward(ctx, grad_full):
    _free(ctx.layer.regathered)
    ctx.layer.regathered = None
    grad_full = grad_full.clone()
    grad_shard = grad_full.new_empty(grad_full.numel() // ctx.layer.world_size)
    dist.reduce_scatter_tensor(grad_shard, grad_full)
    _free(grad_full)
    return grad_shard.div_(ctx.layer.world_size).to(ctx.dtype), None


_GatherLayer.backward = staticmethod(backward)
