"""FlashAttentionTorch's forward hands the work to scaled_dot_product_attention: refused."""

# target: flash_torch.py
# select: flash_attention_torch_forward_and_lse and d16 or cache_bytes_per_token_matches and mha
# fails: flash_attention_torch
# kind: forbidden
# message: may not call torch\.nn\.functional\.scaled_dot_product_attention

import torch.nn.functional as F


def _flash_forward(q, k, v, causal, scale, block_q, block_k):
    out = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True, scale=scale)
    return out, out.sum(-1)
