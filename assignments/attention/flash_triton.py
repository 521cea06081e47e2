# Your working copy: replace every `raise NotImplementedError` with your implementation.
# (Generated from the course's reference by `python -m grader sync`.)
"""FlashAttention-2 as Triton kernels (lecture 03-attention, section 5).

One program of the forward kernel owns BLOCK_M query rows of one (batch, head) and walks over
the keys BLOCK_N at a time with the online softmax, keeping its tiles in on-chip memory; it
writes out and lse once. The backward first computes delta = rowsum(dO * O) per query row, then
runs two kernels, as in FlashAttention-2: one program per block of keys accumulates dK and dV
(walking over queries), one program per block of queries accumulates dQ (walking over keys); both
recompute P = exp(S - lse).

Inputs are like reference.attention: q (B, H, Nq, d), k and v (B, Hkv, Nk, d), H a multiple of
Hkv (GQA), causal aligned to the end of the keys, any Nq and Nk, head_dim 16 to 128. Work in
float32 inside the kernels; out has q's dtype, lse is float32. On a machine without a GPU the
grader runs these kernels in the Triton interpreter (TRITON_INTERPRET=1), slowly: keep shapes
small there.
"""

from __future__ import annotations

import math
import os

import torch
import triton
import triton.language as tl
from reference import check_shapes

# (Write any helper functions you need here.)


class FlashAttentionTriton(torch.autograd.Function):
    """Autograd Function around the Triton kernels; saves (q, k, v, out, lse) for the backward."""

    @staticmethod
    def forward(ctx, q, k, v, causal):
        raise NotImplementedError("implement FlashAttentionTriton.forward (lectures/03-attention.md)")

    @staticmethod
    def backward(ctx, grad_out, grad_lse):
        raise NotImplementedError("implement FlashAttentionTriton.backward (lectures/03-attention.md)")


def flash_attention_triton(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """(out, lse) like flash_torch.flash_attention_torch, computed by Triton kernels, forward
    and backward (differentiable through FlashAttentionTriton). lse is float32. k and v may be
    views into a larger buffer (the filled part of a preallocated KV cache): the results depend
    only on their Nk rows, whatever the memory past them holds, even NaN. May not call torch's
    scaled_dot_product_attention."""
    return FlashAttentionTriton.apply(q, k, v, causal)
