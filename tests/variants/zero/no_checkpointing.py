"""checkpointed_forward that runs the blocks plainly: output and gradients are right, but autograd
keeps every block's activations for backward (n + 1 tensors instead of `segments`)."""
# target: checkpoint.py


def checkpointed_forward(blocks, x, segments):
    if not 1 <= segments <= len(blocks):
        raise ValueError(f"segments must be between 1 and {len(blocks)}, not {segments}")
    for block in blocks:
        x = block(x)
    return x
