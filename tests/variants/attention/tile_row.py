"""FlashAttentionTorch with one key block as wide as all the keys: still the online softmax and
the recomputing backward, and correct, but each step holds a whole row of tiles (block_q x seq_k
scores per head) instead of one tile."""
# target: flash_torch.py

_tiled_forward, _tiled_backward = _flash_forward, _flash_backward


def _flash_forward(q, k, v, causal, scale, block_q, block_k):
    return _tiled_forward(q, k, v, causal, scale, block_q, k.shape[2])


def _flash_backward(q, k, v, out, lse, grad_out, causal, scale, block_q, block_k):
    return _tiled_backward(q, k, v, out, lse, grad_out, causal, scale, block_q, k.shape[2])
