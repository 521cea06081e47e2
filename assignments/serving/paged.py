# Your working copy: replace every `raise NotImplementedError` with your implementation.
# (Generated from the course's reference by `python -m grader sync`.)
"""Given code: the paged KV cache of module kv_cache and a TinyGPT that runs a mixed batch over it
(lecture 10-serving, sections 2 and 3).

The cache is module kv_cache's PagedKVCache (read lecture 05, sections 5 and 6), with two
additions that prefix caching needs: a sequence can start from blocks that are already filled
(`add_sequence(seq_id, prefix_blocks)`), and an owner that is not a sequence, the prefix cache,
can hold a reference to a block (`retain` and `release`).

`ServingModel.forward(cache, entries)` runs ONE model forward over a batch that mixes prefill
chunks and decode tokens of different sequences, each after its own cached positions. Your
scheduler calls it once per step; it counts the calls and the tokens, which is what the grader
reads.
"""

from __future__ import annotations

import torch

from grader.models.tiny_gpt import TinyGPT, TinyGPTConfig

DTYPES = {"float32": torch.float32, "float64": torch.float64}


class PagedKVCache:
    """A pool of `num_blocks` blocks of `block_size` positions for every layer (kv_cache's cache).

    Storage: key_blocks and value_blocks of shape (num_layers, num_blocks, block_size,
    num_kv_heads, head_dim). A sequence owns a block table; position p lives in slot
    p % block_size of block table[p // block_size]. Blocks count their references (sequences
    and the prefix cache); a block returns to the free list when its count falls to 0.

      add_sequence(seq_id, prefix_blocks=())  a new sequence whose table starts with these full
                                              blocks (each gains a reference).
      append(seq_id, layer, k, v)             store (new, num_kv_heads, head_dim) after the
                                              layer's last position; copy-on-write of a shared
                                              block written into; RuntimeError("out of blocks").
      free(seq_id)                            drop the sequence and its references.
      retain(block) / release(block)          a reference held by someone else (the prefix cache).
      ref_count(block), num_free_blocks(), block_table(seq_id), length(seq_id), gather(seq_id, layer)
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
        if num_blocks < 1 or block_size < 1:
            raise ValueError(f"num_blocks ({num_blocks}) and block_size ({block_size}) must be at least 1")
        self.num_blocks, self.block_size = num_blocks, block_size
        shape = (num_layers, num_blocks, block_size, num_kv_heads, head_dim)
        self.key_blocks = torch.zeros(shape, dtype=dtype)
        self.value_blocks = torch.zeros(shape, dtype=dtype)
        self.ref_counts = [0] * num_blocks
        self.free_blocks = list(range(num_blocks - 1, -1, -1))  # a stack: pop() takes block 0 first
        self.tables: dict[int, list[int]] = {}
        self.lengths: dict[int, list[int]] = {}  # per sequence, the length of each layer

    def add_sequence(self, seq_id: int, prefix_blocks: tuple[int, ...] | list[int] = ()) -> None:
        if seq_id in self.tables:
            raise ValueError(f"sequence {seq_id} already exists")
        for block in prefix_blocks:
            if self.ref_counts[block] == 0:
                raise ValueError(f"block {block} is free: only blocks someone holds can be shared")
        for block in prefix_blocks:
            self.ref_counts[block] += 1
        self.tables[seq_id] = list(prefix_blocks)
        self.lengths[seq_id] = [len(prefix_blocks) * self.block_size] * self.key_blocks.shape[0]

    def append(self, seq_id: int, layer: int, k: torch.Tensor, v: torch.Tensor) -> None:
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
        positions = torch.arange(start, end)
        blocks = torch.tensor(table)[positions // self.block_size]
        slots = positions % self.block_size
        self.key_blocks[layer, blocks, slots] = k.to(self.key_blocks)
        self.value_blocks[layer, blocks, slots] = v.to(self.value_blocks)
        lengths[layer] = end

    def free(self, seq_id: int) -> None:
        for block in self._table(seq_id):
            self.release(block)
        del self.tables[seq_id], self.lengths[seq_id]

    def retain(self, block: int) -> None:
        if self.ref_counts[block] == 0:
            raise ValueError(f"block {block} is free: retain only a block someone holds")
        self.ref_counts[block] += 1

    def release(self, block: int) -> None:
        if self.ref_counts[block] == 0:
            raise ValueError(f"block {block} is already free")
        self.ref_counts[block] -= 1
        if self.ref_counts[block] == 0:
            self.free_blocks.append(block)

    def ref_count(self, block: int) -> int:
        return self.ref_counts[block]

    def num_free_blocks(self) -> int:
        return len(self.free_blocks)

    def block_table(self, seq_id: int) -> list[int]:
        return list(self._table(seq_id))

    def length(self, seq_id: int) -> int:
        """Positions the sequence holds (its longest layer)."""
        self._table(seq_id)
        return max(self.lengths[seq_id])

    def gather(self, seq_id: int, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        table, length = self._table(seq_id), self.lengths[seq_id][layer]
        index = torch.tensor(table, dtype=torch.long)
        keys = self.key_blocks[layer, index].flatten(0, 1)[:length]
        values = self.value_blocks[layer, index].flatten(0, 1)[:length]
        return keys.contiguous(), values.contiguous()

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


class _BatchCache:
    """TinyGPT's cache protocol over a PagedKVCache for a batch of rows laid out as

        [padding up to the longest past][row's cached positions][padding up to the widest chunk][row's new tokens]

    update(layer, k, v) returns every row's cached keys and values, left-padded to the longest
    past, followed by the new ones, and appends each row's real new positions to its sequence."""

    def __init__(self, cache: PagedKVCache, seq_ids: list[int], pasts: list[int], news: list[int]) -> None:
        self.cache, self.seq_ids, self.pasts, self.news = cache, seq_ids, pasts, news
        self.seq_len = max(pasts)

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        batch, heads, width, dim = k.shape
        keys = k.new_zeros(batch, heads, self.seq_len + width, dim)
        values = torch.zeros_like(keys)
        keys[:, :, self.seq_len :], values[:, :, self.seq_len :] = k, v
        for row, (seq_id, past, new) in enumerate(zip(self.seq_ids, self.pasts, self.news)):
            if past:
                cached_k, cached_v = self.cache.gather(seq_id, layer)  # (past, heads, dim)
                keys[row, :, self.seq_len - past : self.seq_len] = cached_k.transpose(0, 1).to(k)
                values[row, :, self.seq_len - past : self.seq_len] = cached_v.transpose(0, 1).to(v)
            new_k, new_v = k[row, :, width - new :].transpose(0, 1), v[row, :, width - new :].transpose(0, 1)
            self.cache.append(seq_id, layer, new_k, new_v)
        return keys, values


class ServingModel:
    """TinyGPT for a server: one forward over a mixed batch of sequences in a PagedKVCache.

    forward(cache, entries) -> logits (len(entries), vocab)
        entries: a list of (seq_id, token_ids) with token_ids a non-empty list of ints, the
        sequence's next tokens after the positions `cache` holds for it (a whole prompt, a chunk
        of one, or the one token of a decode step). Runs the model once over all entries,
        appends their keys and values to the cache (the cache must have room: see
        PagedKVCache.append) and returns, per entry, the logits after its last token.

    Counters the grader reads (`counts()`): forward calls, tokens computed, each call's shape
    (rows, widest chunk, longest past), and the logits returned for each entry with the length
    of its sequence after the call (so that the grader compares them with one request alone).
    Attributes: config (TinyGPTConfig), net (the TinyGPT), dtype. Do not run `net` yourself: the
    grader counts the FLOPs of your whole run and expects those of these forward calls.
    """

    def __init__(self, net: TinyGPT) -> None:
        self.net, self.config = net, net.config
        self.dtype = net.token_embedding.weight.dtype
        self.forward_calls, self.tokens_computed = 0, 0
        self.shapes: list[tuple[int, int, int]] = []
        self.logits: list[tuple[object, int, torch.Tensor]] = []  # (seq_id, length after the call, logits)

    def new_cache(self, num_blocks: int, block_size: int) -> PagedKVCache:
        """A PagedKVCache shaped for this model (its layers, KV heads, head_dim and dtype)."""
        c = self.config
        return PagedKVCache(num_blocks, block_size, c.num_layers, c.num_kv_heads, c.head_dim, self.dtype)

    @torch.no_grad()
    def forward(self, cache: PagedKVCache, entries: list[tuple[int, list[int]]]) -> torch.Tensor:
        if not entries or any(len(tokens) == 0 for _, tokens in entries):
            raise ValueError("forward needs at least one entry, each with at least one token")
        seq_ids = [seq_id for seq_id, _ in entries]
        if len(set(seq_ids)) != len(seq_ids):
            raise ValueError(f"a sequence appears twice in one forward: {seq_ids}")
        pasts = [cache.length(seq_id) for seq_id in seq_ids]
        news = [len(tokens) for _, tokens in entries]
        longest_past, width = max(pasts), max(news)
        ids = torch.zeros(len(entries), width, dtype=torch.long)
        mask = torch.zeros(len(entries), longest_past + width, dtype=torch.bool)
        for row, ((_, tokens), past) in enumerate(zip(entries, pasts)):
            ids[row, width - len(tokens) :] = torch.tensor(tokens, dtype=torch.long)
            mask[row, longest_past - past : longest_past] = True
            mask[row, longest_past + width - len(tokens) :] = True
        logits = self.net(ids, cache=_BatchCache(cache, seq_ids, pasts, news), attention_mask=mask)
        self.forward_calls += 1
        self.tokens_computed += sum(news)
        self.shapes.append((len(entries), width, longest_past))
        self.logits += [
            (seq_id, past + new, row.clone()) for seq_id, past, new, row in zip(seq_ids, pasts, news, logits[:, -1])
        ]
        return logits[:, -1]

    def counts(self) -> dict:
        """{"forward_calls", "tokens_computed", "shapes", "logits"}: what this model has run so far."""
        return {
            "forward_calls": self.forward_calls,
            "tokens_computed": self.tokens_computed,
            "shapes": list(self.shapes),
            "logits": list(self.logits),
        }


def build_model(config: dict, seed: int, dtype: str = "float32") -> ServingModel:
    """A ServingModel around TinyGPT(TinyGPTConfig(**config)) with weights drawn from `seed`.

    The grader builds the same TinyGPT in its own process to generate the reference tokens.
    """
    return ServingModel(TinyGPT.from_seed(TinyGPTConfig(**config), seed, DTYPES[dtype]))


def call_or_error(obj: object, method: str, *args: object) -> tuple:
    """Given (the grader uses it): obj.method(*args) as ("ok", result) or ("error", type name,
    message), so that a refused request does not end the grader's script. NotImplementedError
    is not caught."""
    try:
        return ("ok", getattr(obj, method)(*args))
    except NotImplementedError:
        raise
    except Exception as error:
        return ("error", type(error).__name__, str(error))
