"""Scaled dot-product attention, the plain way (lecture 03-attention, section 1).

Shapes follow torch.nn.functional.scaled_dot_product_attention: q is (batch, heads, seq_q,
head_dim), k and v are (batch, kv_heads, seq_k, head_dim), with one head_dim for all three.
`heads` is a multiple of `kv_heads`: query head h reads key/value head h // (heads // kv_heads).
That one rule covers multi-head (kv_heads == heads), grouped-query (1 < kv_heads < heads) and
multi-query (kv_heads == 1) attention.

Causal masking is aligned to the END of the keys: with seq_q <= seq_k, query i sits at position
i + (seq_k - seq_q) and sees keys 0 .. i + (seq_k - seq_q). With seq_q == seq_k this is the usual
lower triangle; with seq_q == 1 it is one decode step that sees the whole cache.
"""

from __future__ import annotations

import importlib
import math

import torch


def check_shapes(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> int:
    """Validate shapes for every attention function of the module; return the group size
    heads // kv_heads. Raises ValueError with the reason."""
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError("q, k and v must be 4-D: (batch, heads, seq, head_dim)")
    if k.shape != v.shape or q.shape[0] != k.shape[0] or q.shape[3] != k.shape[3]:
        raise ValueError(f"incompatible shapes q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}")
    if q.shape[1] % k.shape[1]:
        raise ValueError(f"{q.shape[1]} query heads is not a multiple of {k.shape[1]} key/value heads")
    if causal and q.shape[2] > k.shape[2]:
        raise ValueError("causal attention needs seq_q <= seq_k (queries are the last seq_q positions)")
    return q.shape[1] // k.shape[1]


def causal_mask(seq_q: int, seq_k: int, device: torch.device | None = None) -> torch.Tensor:
    """(seq_q, seq_k) booleans, True where query i may see key j: j <= i + (seq_k - seq_q)."""
    i = torch.arange(seq_q, device=device)[:, None]
    j = torch.arange(seq_k, device=device)[None, :]
    return j <= i + (seq_k - seq_q)


def attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False, scale: float | None = None
) -> torch.Tensor:
    """softmax(q k^T * scale [+ causal mask]) v, materialising the (seq_q, seq_k) scores.

    q: (B, H, Nq, d); k, v: (B, Hkv, Nk, d) with H a multiple of Hkv (MHA, GQA, MQA).
    scale defaults to 1/sqrt(d). Returns (B, H, Nq, d) in q's dtype. Differentiable with
    autograd. Raises ValueError for incompatible shapes (see check_shapes).
    """
    ### BEGIN SOLUTION
    group = check_shapes(q, k, v, causal)
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    # GQA: query head h uses kv head h // group, i.e. each kv head repeated `group` times.
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    scores = (q @ k.transpose(-2, -1)) * scale  # (B, H, Nq, Nk)
    if causal:
        scores = scores.masked_fill(~causal_mask(q.shape[2], k.shape[2], q.device), float("-inf"))
    return torch.softmax(scores, dim=-1) @ v
    ### END SOLUTION


# Given: the grader runs every attention function of the module forward and backward through
# this helper (gradients cannot be asked for across processes). It only calls your function and
# autograd; the grader checks everything it returns against its own reference, so there is
# nothing to gain by changing it.
_FUNCTIONS = {
    "attention": "reference",
    "flash_attention_torch": "flash_torch",
    "flash_attention_triton": "flash_triton",
}


def forward_backward(
    name: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, grad_out: torch.Tensor, causal: bool = False
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Run `name` ("attention", "flash_attention_torch" or "flash_attention_triton") on q, k, v,
    then backpropagate grad_out through its output. Returns (out, lse or None, dq, dk, dv)."""
    function = getattr(importlib.import_module(_FUNCTIONS[name]), name)
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    result = function(q, k, v, causal=causal)
    out, lse = result if isinstance(result, tuple) else (result, None)
    out.backward(grad_out)
    return out.detach(), None if lse is None else lse.detach(), q.grad, k.grad, v.grad
