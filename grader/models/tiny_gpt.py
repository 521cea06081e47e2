"""TinyGPT: the small decoder-only transformer of module kv_cache (given code, read it).

    from grader.models.tiny_gpt import TinyGPT, TinyGPTConfig
    model = TinyGPT.from_seed(TinyGPTConfig(), seed=0)
    logits = model(ids)                                   # (batch, seq, vocab), no cache
    logits = model(new_ids, cache=cache, attention_mask=mask)   # with a cache you wrote

Token and position embeddings, pre-norm blocks (attention and MLP, each with a residual),
grouped-query attention (num_heads query heads share num_kv_heads key/value heads), and an
output head tied to the token embedding. Attention is written out (matmul, mask, softmax,
matmul) so that torch's FlopCounterMode counts every multiply.

The cache protocol (what `forward` asks of `cache`):

    cache.seq_len                     positions already stored (read once, before the layers run)
    cache.update(layer, k, v) -> (keys, values)
        k, v: (batch, num_kv_heads, new, head_dim), the new positions of this layer;
        returns every position stored so far for this layer, (batch, num_kv_heads, seq_len + new,
        head_dim), the new ones last. After the last layer's update, seq_len has grown by `new`.

`attention_mask` (batch, seq_len + new), 1 for real tokens and 0 for padding, covers every
position, the cached ones too. Left padding is supported: a token's position is the number of
real tokens before it, so a padded prompt gets the same positions as the prompt alone, and
padded keys are never attended to.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class TinyGPTConfig:
    vocab_size: int = 97
    max_seq_len: int = 1024
    num_layers: int = 2
    d_model: int = 64
    num_heads: int = 4
    num_kv_heads: int = 2
    mlp_ratio: int = 4

    @property
    def head_dim(self) -> int:
        return self.d_model // self.num_heads


class Cache(Protocol):
    seq_len: int

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]: ...


class Attention(nn.Module):
    def __init__(self, config: TinyGPTConfig, layer: int) -> None:
        super().__init__()
        if config.num_heads % config.num_kv_heads:
            raise ValueError("num_heads must be a multiple of num_kv_heads")
        self.layer = layer
        self.num_heads, self.num_kv_heads, self.head_dim = config.num_heads, config.num_kv_heads, config.head_dim
        self.query = nn.Linear(config.d_model, config.num_heads * config.head_dim, bias=False)
        self.key_value = nn.Linear(config.d_model, 2 * config.num_kv_heads * config.head_dim, bias=False)
        self.out = nn.Linear(config.num_heads * config.head_dim, config.d_model, bias=False)

    def forward(self, x: torch.Tensor, allowed: torch.Tensor, cache: Cache | None) -> torch.Tensor:
        batch, new, _ = x.shape
        q = self.query(x).view(batch, new, self.num_heads, self.head_dim).transpose(1, 2)
        k, v = self.key_value(x).view(batch, new, 2, self.num_kv_heads, self.head_dim).unbind(2)
        k, v = k.transpose(1, 2), v.transpose(1, 2)  # (batch, num_kv_heads, new, head_dim)
        if cache is not None:
            k, v = cache.update(self.layer, k, v)  # every position so far
        # Grouped-query attention: query head h reads key/value head h // (num_heads / num_kv_heads).
        group = self.num_heads // self.num_kv_heads
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        # softmax(q k^T / sqrt(d)) v over the allowed keys: (batch, heads, new, seq) scores.
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(self.head_dim)
        scores = scores.masked_fill(~allowed, float("-inf"))
        y = F.softmax(scores, dim=-1) @ v
        return self.out(y.transpose(1, 2).reshape(batch, new, -1))


class Block(nn.Module):
    def __init__(self, config: TinyGPTConfig, layer: int) -> None:
        super().__init__()
        self.norm_attention = nn.LayerNorm(config.d_model)
        self.attention = Attention(config, layer)
        self.norm_mlp = nn.LayerNorm(config.d_model)
        hidden = config.mlp_ratio * config.d_model
        self.mlp = nn.Sequential(nn.Linear(config.d_model, hidden), nn.GELU(), nn.Linear(hidden, config.d_model))

    def forward(self, x: torch.Tensor, allowed: torch.Tensor, cache: Cache | None) -> torch.Tensor:
        x = x + self.attention(self.norm_attention(x), allowed, cache)
        return x + self.mlp(self.norm_mlp(x))


class TinyGPT(nn.Module):
    def __init__(self, config: TinyGPTConfig) -> None:
        super().__init__()
        self.config = config
        self.token_embedding = nn.Embedding(config.vocab_size, config.d_model)
        self.position_embedding = nn.Embedding(config.max_seq_len, config.d_model)
        self.blocks = nn.ModuleList(Block(config, layer) for layer in range(config.num_layers))
        self.norm = nn.LayerNorm(config.d_model)

    @classmethod
    def from_seed(cls, config: TinyGPTConfig, seed: int, dtype: torch.dtype = torch.float32) -> TinyGPT:
        """A model with weights drawn from `seed`: the same weights in every process."""
        model = cls(config)
        generator = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for name, parameter in model.named_parameters():
                if "norm" in name:
                    continue  # LayerNorm keeps weight 1, bias 0
                # Embeddings N(0, 1) (tied head: logits of a few units, no near-ties); linear
                # layers N(0, 1/fan_in) keep activations O(1).
                std = 1.0 if "embedding" in name or parameter.dim() == 1 else parameter.shape[1] ** -0.5
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * std)
        return model.to(dtype).eval()

    def forward(
        self, ids: torch.Tensor, cache: Cache | None = None, attention_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Logits (batch, new, vocab) of the tokens `ids` (batch, new), after `cache.seq_len` cached ones."""
        batch, new = ids.shape
        past = 0 if cache is None else cache.seq_len
        total = past + new
        if total > self.config.max_seq_len:
            raise ValueError(f"{total} positions exceed max_seq_len={self.config.max_seq_len}")
        if attention_mask is None:
            attention_mask = torch.ones(batch, total, dtype=torch.bool, device=ids.device)
        if attention_mask.shape != (batch, total):
            raise ValueError(f"attention_mask has shape {tuple(attention_mask.shape)}, expected {(batch, total)}")
        real = attention_mask.bool()
        # Position of a token = number of real tokens before it (padding does not count).
        positions = (real.long().cumsum(-1) - 1).clamp(min=0)[:, past:]
        # Query at absolute index i sees key j when j <= i and j is a real token; and always
        # itself, so that a padding query has one key and its (unused) row stays finite.
        query_index = torch.arange(past, total, device=ids.device)[:, None]
        key_index = torch.arange(total, device=ids.device)[None, :]
        allowed = ((key_index <= query_index) & real[:, None, :]) | (key_index == query_index)
        allowed = allowed[:, None]  # (batch, 1, new, total): the same for every head

        x = self.token_embedding(ids) + self.position_embedding(positions)
        for block in self.blocks:
            x = block(x, allowed, cache)
        return self.norm(x) @ self.token_embedding.weight.T  # tied output head
