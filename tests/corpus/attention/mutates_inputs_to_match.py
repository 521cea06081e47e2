"""attention returns zeros and zeroes q, k and v in place, so that a reference computed on the mutated inputs would agree."""

# ruff: noqa: E501, F821 - a fragment appended to a solution file, whose names are in scope
# target: reference.py
# select: attention_matches_sdpa and mha-full
# fails: attention_matches_sdpa
# kind:
# message: elements differ


def attention(q, k, v, causal=False, scale=None):
    with torch.no_grad():
        for tensor in (q, k, v):
            tensor.zero_()
    return torch.zeros_like(q) + 0 * q
