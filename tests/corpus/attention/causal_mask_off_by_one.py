"""attention's causal mask lets each query see one key too many: only causal cases differ."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: reference.py
# select: attention_matches_sdpa and float64
# fails: causal-q(?!1-)
# kind:
# message: elements differ


def attention(q, k, v, causal=False, scale=None):
    group = check_shapes(q, k, v, causal)
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    scores = (q @ k.transpose(-2, -1)) * scale
    if causal:
        i = torch.arange(q.shape[2])[:, None]
        j = torch.arange(k.shape[2])[None, :]
        scores = scores.masked_fill(j > i + (k.shape[2] - q.shape[2]) + 1, float("-inf"))  # one key too many
    return torch.softmax(scores, dim=-1) @ v
