"""GQA repeats the whole block of key/value heads (repeat) instead of each head (repeat_interleave): right for MHA and MQA only."""

# ruff: noqa: E501, F821 - a fragment appended to a solution file, whose names are in scope
# target: reference.py
# select: attention_matches_sdpa
# fails: gqa
# kind:
# message: elements differ


def attention(q, k, v, causal=False, scale=None):
    group = check_shapes(q, k, v, causal)
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    k, v = k.repeat(1, group, 1, 1), v.repeat(1, group, 1, 1)
    scores = (q @ k.transpose(-2, -1)) * scale
    if causal:
        scores = scores.masked_fill(~causal_mask(q.shape[2], k.shape[2], q.device), float("-inf"))
    return torch.softmax(scores, dim=-1) @ v
