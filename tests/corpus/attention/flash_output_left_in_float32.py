"""flash_attention_torch computes in float32 and returns out in float32 whatever q's dtype: right
for float32 and float64, the wrong dtype for bfloat16 and float16 inputs."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: flash_torch.py
# select: flash_attention_torch_forward_and_lse and (float16 or float32)
# fails: float16
# kind:
# message: out: dtype torch\.float32, expected torch\.(b)?float16

_flash_forward_in_q_dtype = _flash_forward


def _flash_forward(q, k, v, causal, scale, block_q, block_k):
    out, lse = _flash_forward_in_q_dtype(q, k, v, causal, scale, block_q, block_k)
    return out.to(lse.dtype), lse  # the accumulator's dtype, never cast back to q's
