"""zero_memory_per_rank allocates a terabyte, far above the worker's memory limit."""


# target: memory.py
# select: zero_memory_reproduces or checkpointed_forward_gives and 9-3
# fails: zero_memory
# kind: memory
# message: memory.py.*\n(.*\n)*.*(can't allocate memory|DefaultCPUAllocator)

import torch


def zero_memory_per_rank(
    num_params, world_size, stage, bytes_per_param=2, bytes_per_grad=2, optimizer_bytes_per_param=12
):
    return float(torch.ones(2**40, dtype=torch.uint8).sum())
