"""FlashAttentionTorch's forward hands the work to torch's scaled_dot_product_attention: refused."""

# target: flash_torch.py
import torch.nn.functional as F


def _flash_forward(q, k, v, causal, scale, block_q, block_k):
    out = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True, scale=scale)
    return out, out.sum(-1)
