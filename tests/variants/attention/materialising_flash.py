"""flash_attention_torch computed by the reference `attention`, lse from the full score matrix:
correct forward and backward, but it builds seq_q x seq_k scores (and autograd keeps them)."""

# target: flash_torch.py
from reference import attention as _materialising_attention
from reference import causal_mask as _causal_mask


def flash_attention_torch(q, k, v, causal=False, block_q=64, block_k=64):
    group = q.shape[1] // k.shape[1]
    scores = q.detach() @ k.detach().repeat_interleave(group, dim=1).transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal:
        scores = scores.masked_fill(~_causal_mask(q.shape[2], k.shape[2]), float("-inf"))
    return _materialising_attention(q, k, v, causal=causal), scores.logsumexp(-1)
