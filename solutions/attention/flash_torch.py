"""FlashAttention-2 in plain PyTorch (lecture 03-attention, sections 3 and 4).

The same math as reference.attention, computed tile by tile: a block of block_q queries against
a block of block_k keys at a time, with the online softmax carrying a running maximum m and a
running denominator l per query row. The full (seq_q, seq_k) score matrix never exists; the
largest intermediate is one tile of scores per (batch, head).

The forward also returns lse = m + log(l), the log-sum-exp of each query row's scaled scores
(natural log, shape (B, H, Nq), float32 or float64 like the computation). The backward recomputes
each tile's probabilities from lse instead of storing them: P = exp(S - lse).

Shapes, GQA and causal alignment are those of reference.attention.
"""

from __future__ import annotations

import math

import torch
from reference import check_shapes

### BEGIN SOLUTION
MASKED = float("-inf")  # the score of a key a query may not see: exp(MASKED) = 0


def _blocks(n: int, size: int) -> list[tuple[int, int]]:
    """[start, end) of each block of `size` covering 0..n (the last may be shorter)."""
    return [(start, min(start + size, n)) for start in range(0, n, size)]


def _tile_scores(
    q_tile: torch.Tensor,
    k_tile: torch.Tensor,
    scale: float,
    rows: tuple[int, int],
    cols: tuple[int, int],
    offset: int,
    causal: bool,
) -> torch.Tensor:
    """Scaled scores of one tile, -inf where query row i may not see key j (j > i + offset)."""
    s = (q_tile @ k_tile.transpose(-2, -1)) * scale
    if causal and cols[1] - 1 > rows[0] + offset:  # the tile reaches above the diagonal
        i = torch.arange(*rows, device=s.device)[:, None]
        j = torch.arange(*cols, device=s.device)[None, :]
        s = s.masked_fill(j > i + offset, MASKED)
    return s


def _visible(rows: tuple[int, int], cols: tuple[int, int], offset: int, causal: bool) -> bool:
    """Whether any query of `rows` sees any key of `cols` (tiles fully above the diagonal are skipped)."""
    return not causal or cols[0] <= rows[1] - 1 + offset


def _split_heads(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, group: int):
    """Views that make GQA a broadcast: q (B, Hkv, G, Nq, d); k, v (B, Hkv, 1, Nk, d)."""
    return q.unflatten(1, (k.shape[1], group)), k.unsqueeze(2), v.unsqueeze(2)


def _flash_forward(q, k, v, causal, scale, block_q, block_k):
    group = check_shapes(q, k, v, causal)
    q5, k5, v5 = _split_heads(q, k, v, group)
    compute = torch.float64 if q.dtype == torch.float64 else torch.float32
    nq, nk = q.shape[2], k.shape[2]
    offset = nk - nq  # causal: query i sees keys j <= i + offset
    out = torch.empty_like(q5)
    lse = torch.empty(q5.shape[:-1], dtype=compute, device=q.device)
    for rows in _blocks(nq, block_q):
        q_tile = q5[..., rows[0] : rows[1], :].to(compute)
        m = torch.full(q_tile.shape[:-1], MASKED, dtype=compute, device=q.device)  # running max
        denom = torch.zeros_like(m)  # running sum of exp(s - m)
        acc = torch.zeros_like(q_tile)  # running sum of exp(s - m) v
        for cols in _blocks(nk, block_k):
            if not _visible(rows, cols, offset, causal):
                break  # key blocks go left to right: every later one is masked too
            s = _tile_scores(q_tile, k5[..., cols[0] : cols[1], :].to(compute), scale, rows, cols, offset, causal)
            # Online softmax: rescale what was summed under the old max to the new one.
            m_new = torch.maximum(m, s.amax(dim=-1))
            p = torch.exp(s - m_new[..., None])
            correction = torch.exp(m - m_new)
            denom = denom * correction + p.sum(dim=-1)
            acc = acc * correction[..., None] + p @ v5[..., cols[0] : cols[1], :].to(compute)
            m = m_new
        out[..., rows[0] : rows[1], :] = (acc / denom[..., None]).to(q.dtype)
        lse[..., rows[0] : rows[1]] = m + torch.log(denom)
    return out.flatten(1, 2), lse.flatten(1, 2)


def _flash_backward(q, k, v, out, lse, grad_out, causal, scale, block_q, block_k):
    """FlashAttention-2 backward: per tile, P = exp(S - lse) and
    dV += P^T dO,  dP = dO V^T,  dS = P * (dP - D) with D = rowsum(dO * O),
    dQ += dS K * scale,  dK += dS^T Q * scale."""
    group = q.shape[1] // k.shape[1]
    compute = lse.dtype
    q5, k5, v5 = _split_heads(q.to(compute), k.to(compute), v.to(compute), group)
    do5 = grad_out.to(compute).unflatten(1, (k.shape[1], group))
    lse5 = lse.unflatten(1, (k.shape[1], group))
    d5 = (do5 * out.to(compute).unflatten(1, (k.shape[1], group))).sum(dim=-1)  # D_i = dO_i . O_i
    dq, dk, dv = torch.zeros_like(q5), torch.zeros_like(k5), torch.zeros_like(v5)
    nq, nk = q.shape[2], k.shape[2]
    offset = nk - nq
    for rows in _blocks(nq, block_q):
        r = slice(*rows)
        for cols in _blocks(nk, block_k):
            if not _visible(rows, cols, offset, causal):
                break
            c = slice(*cols)
            s = _tile_scores(q5[..., r, :], k5[..., c, :], scale, rows, cols, offset, causal)
            p = torch.exp(s - lse5[..., r, None])
            # The G query heads of a group share k and v: their contributions sum (dim 2).
            dv[..., c, :] += (p.transpose(-2, -1) @ do5[..., r, :]).sum(dim=2, keepdim=True)
            ds = p * (do5[..., r, :] @ v5[..., c, :].transpose(-2, -1) - d5[..., r, None])
            dq[..., r, :] += (ds @ k5[..., c, :]) * scale
            dk[..., c, :] += (ds.transpose(-2, -1) @ q5[..., r, :]).sum(dim=2, keepdim=True) * scale
    return dq.flatten(1, 2).to(q.dtype), dk.squeeze(2).to(k.dtype), dv.squeeze(2).to(v.dtype)


### END SOLUTION


class FlashAttentionTorch(torch.autograd.Function):
    """Autograd Function: forward saves (q, k, v, out, lse), never the probabilities; backward
    recomputes them tile by tile from lse (FlashAttention-2). lse is not differentiable."""

    @staticmethod
    def forward(ctx, q, k, v, causal, block_q, block_k):
        ### BEGIN SOLUTION
        scale = 1 / math.sqrt(q.shape[-1])
        out, lse = _flash_forward(q, k, v, causal, scale, block_q, block_k)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.options = (causal, scale, block_q, block_k)
        ctx.mark_non_differentiable(lse)
        return out, lse
        ### END SOLUTION

    @staticmethod
    def backward(ctx, grad_out, grad_lse):
        ### BEGIN SOLUTION
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = _flash_backward(q, k, v, out, lse, grad_out, *ctx.options)
        return dq, dk, dv, None, None, None
        ### END SOLUTION


def flash_attention_torch(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False, block_q: int = 64, block_k: int = 64
) -> tuple[torch.Tensor, torch.Tensor]:
    """(out, lse) of softmax(q k^T / sqrt(d)) v, tiled: no tensor of seq_q x seq_k elements
    (nor one block_q x seq_k row of tiles) is ever created, forward or backward.

    q: (B, H, Nq, d); k, v: (B, Hkv, Nk, d). out: (B, H, Nq, d) in q's dtype. lse: (B, H, Nq),
    the natural log-sum-exp of each row of scaled (masked) scores, computed in float32 (float64
    for float64 inputs). Any Nq, Nk (not only multiples of the blocks). Differentiable through
    FlashAttentionTorch (out only: lse is not differentiable). With causal=True, every
    block_q x block_k tile entirely above the diagonal is skipped, forward and backward (never
    computed, not computed then masked): the grader counts the matmul FLOPs. May not call torch's
    scaled_dot_product_attention.
    """
    return FlashAttentionTorch.apply(q, k, v, causal, block_q, block_k)
