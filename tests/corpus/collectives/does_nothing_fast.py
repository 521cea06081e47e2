"""The ring functions return at once without sending anything: frugal and fast, and wrong."""

# target: ring.py
# select: sends_at_most_its_share or bandwidth_bound and 4 or time_within
# fails: sends_at_most|time_within
# kind:
# message: rank 0: .* on the measured input


def ring_allreduce(tensor, group=None):
    return tensor


def ring_reduce_scatter(tensor, group=None):
    return tensor.flatten()[: tensor.numel() // 4].clone()


def ring_allgather(shard, group=None):
    return shard.flatten().repeat(4)
