"""quantize clamps every scale to at least 1e-8 instead of giving an all-zero group the scale 1:
its values still dequantize to zero, but the scale is not the documented one."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: integer.py
# select: all_zero_group
# fails: all_zero_group_scale_one
# kind:
# message: 1 for the zero group

_documented = quantize


def quantize(x, *args, **kwargs):
    quantized = _documented(x, *args, **kwargs)
    zero = quantized.scale == 1.0  # groups whose absmax was 0 (or exactly qmax)
    quantized.scale = torch.where(zero, torch.full_like(quantized.scale, 1e-8), quantized.scale)  # the bug
    return quantized
