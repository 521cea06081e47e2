"""A slow ring that memoises its result by input: timing rounds that repeat one input would see it return at once."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: ring.py
# select: time_within
# fails: time_within
# kind:
# message: x gloo's all_reduce

import time

_CACHE = {}
_correct_ring_allreduce = ring_allreduce


def ring_allreduce(tensor, group=None):
    key = (tensor.shape, tensor.dtype, float(tensor.double().sum()))
    if key not in _CACHE:
        time.sleep(0.5)  # stands for a slow ring
        _CACHE[key] = _correct_ring_allreduce(tensor.clone(), group)
    return tensor.copy_(_CACHE[key])
