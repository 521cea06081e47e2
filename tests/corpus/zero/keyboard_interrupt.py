"""zero_memory_per_rank raises KeyboardInterrupt, as if Ctrl-C had been pressed."""

# target: memory.py
# select: zero_memory_reproduces or zero_memory_uses or checkpointed_forward_gives and 9-3
# fails: zero_memory
# kind: exception
# message: raised KeyboardInterrupt


def zero_memory_per_rank(
    num_params, world_size, stage, bytes_per_param=2, bytes_per_grad=2, optimizer_bytes_per_param=12
):
    raise KeyboardInterrupt
