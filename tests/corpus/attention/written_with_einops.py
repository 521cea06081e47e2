"""A correct attention written the way many students write it, with einops: the course's
environment has einops, and it imports and runs inside the grader's workers (full marks)."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: reference.py
# select: attention_matches_sdpa
# fails: -
# kind:
# message:

import einops


def attention(q, k, v, causal=False, scale=None):
    group = check_shapes(q, k, v, causal)
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    # Query heads (kv, g) share kv head kv: split them instead of repeating the keys.
    q = einops.rearrange(q, "b (kv g) nq d -> b kv g nq d", g=group)
    scores = einops.einsum(q, k, "b kv g nq d, b kv nk d -> b kv g nq nk") * scale
    if causal:
        scores = scores.masked_fill(~causal_mask(q.shape[3], k.shape[2], q.device), float("-inf"))
    out = einops.einsum(torch.softmax(scores, dim=-1), v, "b kv g nq nk, b kv nk d -> b kv g nq d")
    return einops.rearrange(out, "b kv g nq d -> b (kv g) nq d")
