"""checkpoint.py reloads torch.utils.checkpoint: the library's checkpoint replaces the guard's wrapper."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: checkpoint.py
# select: checkpointed_forward_gives and 9-3
# fails: checkpointed_forward
# kind: forbidden
# message: changed torch\.utils\.checkpoint\.checkpoint

import importlib

import torch.utils.checkpoint as _library_checkpoint

importlib.reload(_library_checkpoint)  # re-runs the module: checkpoint is the library's again


def checkpointed_forward(blocks, x, segments):
    for start, end in _split(len(blocks), segments):
        x = _library_checkpoint.checkpoint(nn.Sequential(*blocks[start:end]), x, use_reentrant=False)
    return x
