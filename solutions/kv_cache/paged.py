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
        ### BEGIN SOLUTION
        self.block_size = block_size
        shape = (num_layers, num_blocks, block_size, num_kv_heads, head_dim)
        self.key_blocks = torch.zeros(shape, dtype=dtype)
        self.value_blocks = torch.zeros(shape, dtype=dtype)
        self.ref_counts = [0] * num_blocks
        self.free_blocks = list(range(num_blocks - 1, -1, -1))  # a stack: pop() takes block 0 first
        self.tables: dict[int, list[int]] = {}
        self.lengths: dict[int, list[int]] = {}  # per sequence, the length of each layer
        ### END SOLUTION

    def add_sequence(self, seq_id: int) -> None:
        ### BEGIN SOLUTION
        if seq_id in self.tables:
            raise ValueError(f"sequence {seq_id} already exists")
        self.tables[seq_id] = []
        self.lengths[seq_id] = [0] * self.key_blocks.shape[0]
        ### END SOLUTION

    def append(self, seq_id: int, layer: int, k: torch.Tensor, v: torch.Tensor) -> None:
        ### BEGIN SOLUTION
        table, lengths = self._table(seq_id), self.lengths[seq_id]
        start, end = lengths[layer], lengths[layer] + k.shape[0]
        first, last = start // self.block_size, (end - 1) // self.block_size
        shared = [i for i in range(first, min(last + 1, len(table))) if self.ref_counts[table[i]] > 1]
        new_blocks = max(0, last + 1 - len(table))
        if len(shared) + new_blocks > len(self.free_blocks):
            raise RuntimeError(
                f"out of blocks: sequence {seq_id} needs {len(shared) + new_blocks}, {len(self.free_blocks)} are free"
            )
        for i in shared:  # copy-on-write: a private copy replaces the shared block here
            table[i] = self._copy_block(table[i])
        for _ in range(new_blocks):
            table.append(self._take_block())
        # Scatter the new positions to (block, slot) pairs through the table.
        positions = torch.arange(start, end)
        blocks = torch.tensor(table)[positions // self.block_size]
        slots = positions % self.block_size
        self.key_blocks[layer, blocks, slots] = k.to(self.key_blocks)
        self.value_blocks[layer, blocks, slots] = v.to(self.value_blocks)
        lengths[layer] = end
        ### END SOLUTION

    def fork(self, parent_id: int, child_id: int) -> None:
        ### BEGIN SOLUTION
        table = self._table(parent_id)
        if child_id in self.tables:
            raise ValueError(f"sequence {child_id} already exists")
        for block in table:
            self.ref_counts[block] += 1
        self.tables[child_id] = list(table)
        self.lengths[child_id] = list(self.lengths[parent_id])
        ### END SOLUTION

    def free(self, seq_id: int) -> None:
        ### BEGIN SOLUTION
        for block in self._table(seq_id):
            self.ref_counts[block] -= 1
            if self.ref_counts[block] == 0:
                self.free_blocks.append(block)
        del self.tables[seq_id], self.lengths[seq_id]
        ### END SOLUTION

    def block_table(self, seq_id: int) -> list[int]:
        ### BEGIN SOLUTION
        return list(self._table(seq_id))
        ### END SOLUTION

    def num_free_blocks(self) -> int:
        ### BEGIN SOLUTION
        return len(self.free_blocks)
        ### END SOLUTION

    def gather(self, seq_id: int, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        ### BEGIN SOLUTION
        table, length = self._table(seq_id), self.lengths[seq_id][layer]
        index = torch.tensor(table, dtype=torch.long)
        # (blocks, block_size, heads, dim) -> (blocks * block_size, heads, dim), then the length.
        keys = self.key_blocks[layer, index].flatten(0, 1)[:length]
        values = self.value_blocks[layer, index].flatten(0, 1)[:length]
        return keys.contiguous(), values.contiguous()
        ### END SOLUTION

    ### BEGIN SOLUTION
    def _table(self, seq_id: int) -> list[int]:
        if seq_id not in self.tables:
            raise KeyError(f"no sequence {seq_id}")
        return self.tables[seq_id]

    def _take_block(self) -> int:
        block = self.free_blocks.pop()
        self.ref_counts[block] = 1
        return block

    def _copy_block(self, block: int) -> int:
        copy = self._take_block()
        self.key_blocks[:, copy] = self.key_blocks[:, block]
        self.value_blocks[:, copy] = self.value_blocks[:, block]
        self.ref_counts[block] -= 1
        return copy

    ### END SOLUTION


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
    ### BEGIN SOLUTION
    _, num_heads, head_dim = q.shape
    size = cache.block_size
    lengths = torch.tensor([cache.lengths[s][layer] for s in seq_ids])
    tables = [cache.block_table(s) for s in seq_ids]
    width = max(len(t) for t in tables)
    padded = torch.tensor([t + [0] * (width - len(t)) for t in tables], dtype=torch.long)  # (batch, width)
    # (batch, width, block_size, kv_heads, dim) -> (batch, kv_heads, width * block_size, dim)
    keys = cache.key_blocks[layer, padded].flatten(1, 2).transpose(1, 2).to(q)
    values = cache.value_blocks[layer, padded].flatten(1, 2).transpose(1, 2).to(q)
    group = num_heads // keys.shape[1]
    keys, values = keys.repeat_interleave(group, dim=1), values.repeat_interleave(group, dim=1)
    scores = (q[:, :, None, :] @ keys.transpose(-2, -1)) / head_dim**0.5  # (batch, heads, 1, slots)
    valid = (torch.arange(width * size)[None, :] < lengths[:, None]).to(q.device)  # (batch, slots)
    scores = scores.masked_fill(~valid[:, None, None, :], float("-inf"))
    return (torch.softmax(scores, dim=-1) @ values)[:, :, 0]
    ### END SOLUTION


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
