# Your working copy: replace every `raise NotImplementedError` with your implementation.
# (Generated from the course's reference by `python -m grader sync`.)
"""A paged KV cache with prefix sharing, vLLM-style (lecture 05-kv-cache, sections 4 and 5).

Keys and values live in a pool of fixed-size blocks, `block_size` positions each. A sequence
owns a block table: the list of its blocks, in order; position p of a sequence is slot
p % block_size of block table[p // block_size]. Blocks are taken from a free list only when a
sequence grows into them, so no memory is reserved for tokens that may never come.

Forking a sequence (beam search, parallel sampling, a shared system prompt) copies only its
block table: both sequences point to the same blocks, and each block counts its references. A
shared block is never written to: before appending into it, the writer gets a private copy
(copy-on-write). A block returns to the free list when its last reference is freed.
"""

from __future__ import annotations

from typing import Any

import torch


class PagedKVCache:
    """A pool of `num_blocks` blocks of `block_size` positions, for every layer at once.

    Storage: key_blocks and value_blocks of shape (num_layers, num_blocks, block_size,
    num_kv_heads, head_dim), allocated in __init__. A block holds the same positions of every
    layer. Each layer of a sequence has its own length (layers are appended one at a time), and a
    sequence holds exactly ceil(longest layer length / block_size) blocks: never more than one
    partly filled block, and a block only once a position is written into it.

    Methods (seq_id is an int):
      add_sequence(seq_id)          a new, empty sequence (no block yet).
      append(seq_id, layer, k, v)   k, v: (new, num_kv_heads, head_dim) with new >= 1; store them
                                    after the layer's last position. Any block the write lands in
                                    whose reference count is above 1 is first replaced, in this
                                    sequence's table only, by a private copy (all layers, all
                                    slots); then new blocks are taken as needed.
      fork(parent_id, child_id)     a new sequence sharing all of the parent's blocks (and lengths).
      free(seq_id)                  drop the sequence; blocks whose count falls to 0 become free.
      block_table(seq_id)           its block indices, in order (a list of ints).
      num_free_blocks()             blocks on the free list.
      gather(seq_id, layer)         (keys, values), each (length, num_kv_heads, head_dim), contiguous.

    Errors, each raised before anything changes: KeyError for a seq_id that does not exist;
    ValueError for add_sequence or fork to a seq_id that exists; RuntimeError("out of blocks")
    when an append needs more free blocks (copies + new ones) than there are.
    """

    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        num_layers: int,
        num_kv_heads: int,
        head_dim: int,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        raise NotImplementedError("implement PagedKVCache.__init__ (lectures/05-kv-cache.md, section 5)")

    def add_sequence(self, seq_id: int) -> None:
        raise NotImplementedError("implement PagedKVCache.add_sequence (lectures/05-kv-cache.md, section 5)")

    def append(self, seq_id: int, layer: int, k: torch.Tensor, v: torch.Tensor) -> None:
        raise NotImplementedError("implement PagedKVCache.append (lectures/05-kv-cache.md, section 5)")

    def fork(self, parent_id: int, child_id: int) -> None:
        raise NotImplementedError("implement PagedKVCache.fork (lectures/05-kv-cache.md, section 5)")

    def free(self, seq_id: int) -> None:
        raise NotImplementedError("implement PagedKVCache.free (lectures/05-kv-cache.md, section 5)")

    def block_table(self, seq_id: int) -> list[int]:
        raise NotImplementedError("implement PagedKVCache.block_table (lectures/05-kv-cache.md, section 5)")

    def num_free_blocks(self) -> int:
        raise NotImplementedError("implement PagedKVCache.num_free_blocks (lectures/05-kv-cache.md, section 5)")

    def gather(self, seq_id: int, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError("implement PagedKVCache.gather (lectures/05-kv-cache.md, section 5)")

    # (Write any helper functions you need here.)


def paged_decode_attention(q: torch.Tensor, cache: PagedKVCache, seq_ids: list[int], layer: int) -> torch.Tensor:
    """One decode step of attention for a batch of sequences, through their block tables.

    q: (batch, num_heads, head_dim), the query of each sequence's newest token; seq_ids[b] is the
    sequence of row b. Row b attends to every cached position of its sequence in `layer`:
        out[b, h] = softmax(q[b, h] . K_b^T / sqrt(head_dim)) V_b
    with query head h reading KV head h // (num_heads / num_kv_heads) (grouped-query attention).
    Returns (batch, num_heads, head_dim) in q's dtype. Read the keys and values from the block
    pool by block table: pad the tables of the batch to the longest and mask positions past
    each sequence's length, rather than calling gather for each sequence.
    """
    raise NotImplementedError("implement paged_decode_attention (lectures/05-kv-cache.md, section 5)")


def call_or_error(obj: Any, method: str, *args: Any) -> tuple:
    """Given (the grader uses it): obj.method(*args) as ("ok", result) or ("error", type name).

    The grader runs a whole program of cache operations in one call; this keeps an expected
    error (say, out of blocks) from ending the program. NotImplementedError is not caught.
    """
    try:
        return ("ok", getattr(obj, method)(*args))
    except NotImplementedError:
        raise
    except Exception as error:
        return ("error", type(error).__name__)
