"""attention normalises exp(scores) by their sum without subtracting the row maximum: right for
ordinary inputs, inf / inf = NaN once scores pass ~88 in float32."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: reference.py
# select: attention_is_stable or attention_matches_sdpa and mha
# fails: attention_is_stable
# kind:
# message: subtract each row.s maximum


def attention(q, k, v, causal=False, scale=None):
    group = check_shapes(q, k, v, causal)
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    scores = (q @ k.transpose(-2, -1)) * scale
    if causal:
        scores = scores.masked_fill(~causal_mask(q.shape[2], k.shape[2], q.device), float("-inf"))
    weights = scores.exp()
    return (weights / weights.sum(dim=-1, keepdim=True)) @ v
