"""checkpointed_forward on torch.utils.checkpoint: refused by the [forbidden] set `checkpoint`."""
# target: checkpoint.py


def checkpointed_forward(blocks, x, segments):
    import torch.utils.checkpoint

    for start, end in _split(len(blocks), segments):
        x = torch.utils.checkpoint.checkpoint(nn.Sequential(*blocks[start:end]), x, use_reentrant=False)
    return x
