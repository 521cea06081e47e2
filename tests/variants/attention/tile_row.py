"""flash_attention_torch with one key block as wide as all the keys: still the online softmax and
the recomputing backward, and correct, but each step holds a whole row of tiles (block_q x seq_k
scores per head) instead of one tile."""
# target: flash_torch.py


def flash_attention_torch(q, k, v, causal=False, block_q=64, block_k=64):
    return FlashAttentionTorch.apply(q, k, v, causal, block_q, k.shape[2])
