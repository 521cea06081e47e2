"""The KV cache: its size, and a preallocated cache for TinyGPT (lecture 05-kv-cache, section 2).

During decoding every new token attends to the keys and values of all earlier tokens. They do
not change once computed, so a cache keeps them: each step computes k and v for one new position
and appends them, instead of recomputing the whole sequence.
"""

from __future__ import annotations

import torch


def kv_cache_bytes(
    num_layers: int, num_kv_heads: int, head_dim: int, seq_len: int, batch: int, dtype: torch.dtype
) -> int:
    """Bytes of keys and values cached for `batch` sequences of `seq_len` tokens.

    Every layer stores one key and one value vector per KV head per token:
        2 * num_layers * num_kv_heads * head_dim * seq_len * batch * bytes_per_element
    Multi-head attention has num_kv_heads = num_heads, grouped-query attention fewer, multi-query
    attention one. Example: Llama-2-7B (32 layers, 32 heads of 128, float16) needs 512 KiB per token.
    """
    ### BEGIN SOLUTION
    element = torch.empty((), dtype=dtype).element_size()
    return 2 * num_layers * num_kv_heads * head_dim * seq_len * batch * element
    ### END SOLUTION


class KVCache:
    """A cache for `batch` sequences of up to `max_seq_len` positions, allocated once.

    Follows TinyGPT's cache protocol (grader/models/tiny_gpt.py):

    - `seq_len`: positions stored so far, 0 at first.
    - `update(layer, k, v)`: k and v are (batch, num_kv_heads, new, head_dim); write them at
      positions seq_len .. seq_len + new - 1 of `layer` and return (keys, values) of every
      position stored for that layer, (batch, num_kv_heads, seq_len + new, head_dim). The last
      layer's update (layer == num_layers - 1) advances seq_len by `new`.

    Keys and values live in two tensors of shape (num_layers, batch, num_kv_heads, max_seq_len,
    head_dim) allocated in __init__; updates write into them and return views (no torch.cat, no
    new allocation per step). An update that would go past max_seq_len raises ValueError saying
    so, and changes nothing.
    """

    def __init__(
        self,
        num_layers: int,
        batch: int,
        max_seq_len: int,
        num_kv_heads: int,
        head_dim: int,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ) -> None:
        ### BEGIN SOLUTION
        self.num_layers, self.max_seq_len = num_layers, max_seq_len
        shape = (num_layers, batch, num_kv_heads, max_seq_len, head_dim)
        self.keys = torch.zeros(shape, dtype=dtype, device=device)
        self.values = torch.zeros(shape, dtype=dtype, device=device)
        self.seq_len = 0
        ### END SOLUTION

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append this layer's new positions; return its keys and values so far (see the class)."""
        ### BEGIN SOLUTION
        start, end = self.seq_len, self.seq_len + k.shape[2]
        if end > self.max_seq_len:
            raise ValueError(f"the cache holds {self.max_seq_len} positions; {end} would not fit")
        self.keys[layer, :, :, start:end] = k
        self.values[layer, :, :, start:end] = v
        if layer == self.num_layers - 1:
            self.seq_len = end
        return self.keys[layer, :, :, :end], self.values[layer, :, :, :end]
        ### END SOLUTION
