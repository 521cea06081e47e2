"""quantize_nf4 checks for NaN only, and quantizes infinite values as if they were zeros."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: nf4.py
# select: quantize_nf4
# fails: rejects_empty_and_infinite_input\[(minus-)?inf\]
# kind:
# message: expected ValueError, but the call returned normally

_checked = quantize_nf4


def quantize_nf4(x, block_size=64):
    if x.numel() and torch.isinf(x).any() and not torch.isnan(x).any():
        return _checked(torch.where(torch.isinf(x), torch.zeros_like(x), x), block_size)  # the bug
    return _checked(x, block_size)
