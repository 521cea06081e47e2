"""checkpointed_forward hands the work to torch.utils.checkpoint: refused."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: checkpoint.py
# select: checkpointed_forward_gives and 9-3 or zero_memory_uses
# fails: checkpointed_forward
# kind: forbidden
# message: checkpointed_forward may not call torch\.utils\.checkpoint\.checkpoint


def checkpointed_forward(blocks, x, segments):
    import torch.utils.checkpoint

    for start, end in _split(len(blocks), segments):
        x = torch.utils.checkpoint.checkpoint(nn.Sequential(*blocks[start:end]), x, use_reentrant=False)
    return x
