"""All-gathered K/V whose backward all-reduces the whole gradient of the gathered K and V, then
keeps this rank's slice, instead of reduce-scattering it: the gradients are right, and on gloo
(whose reduce-scatter is an all-reduce) it sends exactly the bytes of the reference, but on NCCL
it sends twice a reduce-scatter's, and the docstring names the reduce-scatter."""
# target: ulysses.py


def _all_reducing_backward(ctx, grad):
    rank, p = dist.get_rank(ctx.group), dist.get_world_size(ctx.group)
    whole = grad.contiguous().clone()
    dist.all_reduce(whole, group=ctx.group)
    return whole.chunk(p, dim=2)[rank], None


_GatherSequence.backward = staticmethod(_all_reducing_backward)
