# Your working copy: replace every `raise NotImplementedError` with your implementation.
# (Generated from the course's reference by `python -m grader sync`.)
"""Multi-head latent attention (DeepSeek-V2, without RoPE) and KV-cache sizes (lecture
03-attention, section 6).

MLA caches one latent vector c = x W_dkv of kv_latent_dim numbers per token instead of a key
and a value per head. Keys and values are reconstructed from it: k_h = c W_uk_h, v_h = c W_uv_h.
Because attention is linear in k and v, the up-projections can be folded ("absorbed") into the
query and the output projections, so decoding never rebuilds k and v:

    q_h . k_h = q_h . (c W_uk_h) = (q_h W_uk_h^T) . c        scores against the latent itself
    sum_j p_j v_h,j = (sum_j p_j c_j) W_uv_h                   values are the latent too

Weights (nn.Linear without bias, y = x W^T, so `weight` is (out_features, in_features)):
    w_q:   d_model -> n_heads * head_dim
    w_dkv: d_model -> kv_latent_dim           (the cached latent)
    w_uk:  kv_latent_dim -> n_heads * head_dim
    w_uv:  kv_latent_dim -> n_heads * head_dim
    w_o:   n_heads * head_dim -> d_model
Head h uses rows h*head_dim .. (h+1)*head_dim of w_q, w_uk and w_uv's weights, and the same
columns of w_o's weight. Scores are scaled by 1/sqrt(head_dim) in both forwards.
"""

from __future__ import annotations

import math

import torch
from reference import attention
from torch import nn


class MultiHeadLatentAttention(nn.Module):
    def __init__(self, d_model: int, n_heads: int, head_dim: int, kv_latent_dim: int) -> None:
        super().__init__()
        self.n_heads, self.head_dim, self.kv_latent_dim = n_heads, head_dim, kv_latent_dim
        self.w_q = nn.Linear(d_model, n_heads * head_dim, bias=False)
        self.w_dkv = nn.Linear(d_model, kv_latent_dim, bias=False)
        self.w_uk = nn.Linear(kv_latent_dim, n_heads * head_dim, bias=False)
        self.w_uv = nn.Linear(kv_latent_dim, n_heads * head_dim, bias=False)
        self.w_o = nn.Linear(n_heads * head_dim, d_model, bias=False)

    def latent(self, x: torch.Tensor) -> torch.Tensor:
        """The cached latent c = x W_dkv^T: (batch, seq, kv_latent_dim)."""
        return self.w_dkv(x)

    def forward(self, x: torch.Tensor, causal: bool = True) -> torch.Tensor:
        """Naive forward: rebuild per-head k and v from the latent, then ordinary multi-head
        attention (reference.attention). x: (batch, seq, d_model) -> (batch, seq, d_model)."""
        raise NotImplementedError("implement MultiHeadLatentAttention.forward (lectures/03-attention.md, section 6)")

    def forward_absorbed(self, x: torch.Tensor, causal: bool = True) -> torch.Tensor:
        """Absorbed forward: the same result as forward(), computed without ever forming k or v.
        Fold W_uk into the query (q_h W_uk_h, a kv_latent_dim vector per head), attend over the
        latent as one shared key/value head (multi-query attention with scale 1/sqrt(head_dim)),
        then fold W_uv into the output projection."""
        raise NotImplementedError("implement MultiHeadLatentAttention.forward_absorbed (lectures/03-attention.md, section 6)")


def cache_bytes_per_token(
    variant: str,
    n_layers: int,
    n_heads: int,
    head_dim: int,
    n_kv_heads: int | None = None,
    kv_latent_dim: int | None = None,
    bytes_per_element: int = 2,
) -> int:
    """Bytes of KV cache one token occupies across all layers, for `variant`:
    "mha" (a key and a value per head), "gqa" (per key/value head: n_kv_heads required),
    "mqa" (one key/value head) or "mla" (one latent of kv_latent_dim: required).
    Raises ValueError for an unknown variant or a missing size."""
    raise NotImplementedError("implement cache_bytes_per_token (lectures/03-attention.md, section 6)")
