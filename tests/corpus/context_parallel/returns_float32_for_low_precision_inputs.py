"""ring_attention computes in float32 and returns that for bfloat16 and float16 inputs, instead
of the dtype of q that its docstring promises (float64 and float32 inputs come back unchanged)."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: ring.py
# select: ring_attention_stays_finite or ring_attention_matches_sdpa_on_the_whole_sequence
# fails: ring_attention_stays_finite_on_large_logits
# kind:
# message: ring_attention returned float32 for bfloat16 inputs; the docstring promises q's dtype

_ring_attention_keeping_the_dtype = ring_attention


def ring_attention(q, k, v, causal=False, group=None, layout="contiguous"):
    out = _ring_attention_keeping_the_dtype(q, k, v, causal=causal, group=group, layout=layout)
    return out.float() if q.dtype in (torch.bfloat16, torch.float16) else out
