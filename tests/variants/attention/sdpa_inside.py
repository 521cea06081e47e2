"""flash_attention_torch hands the work to torch's scaled_dot_product_attention: refused."""

# target: flash_torch.py
import torch.nn.functional as F


def flash_attention_torch(q, k, v, causal=False, block_q=64, block_k=64):
    out = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
    return out, out.sum(-1)
