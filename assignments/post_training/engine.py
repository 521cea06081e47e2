# Your working copy: replace every `raise NotImplementedError` with your implementation.
# (Generated from the course's reference by `python -m grader sync`.)
"""The inference engine that generates rollouts (given code, read it; lecture 16, section 6).

Module serving's engine reduced to what rollouts need, on TinyGPT's weights in the tensor-parallel
layout of sync.py's tp_shard:

- a paged KV cache: a pool of blocks per layer and a block table per sequence (module kv_cache's
  design; position p of a sequence lives in slot p % block_size of block table[p // block_size]);
- continuous batching: at most `max_batch` sequences decode together, one token each per step; a
  sequence that finishes (its end token or max_new_tokens) leaves the batch and frees its blocks,
  and the next waiting request is admitted (its prompt prefilled alone);
- seeded sampling: request i draws from its own torch.Generator seeded with seeds[i], so its
  tokens do not depend on which other requests share its batches, nor on the order they run;
- tensor parallelism: one replica of tp ranks (a process group; tp = 1 runs in one process
  without torch.distributed). Each rank keeps its tp_shard of every parameter: query, key_value
  and mlp.0 split by output rows (heads for attention), out and mlp.2 by input columns, the rest
  whole. Attention's out and mlp.2 give partial sums: one all_reduce after each, and mlp.2's
  bias is added once, after the reduction.

What `generate` returns for each request: the sampled tokens (the end token last, if it was
sampled) and the log-probability of each under the engine's weights at temperature 1,
log softmax(logits)[token], whatever the sampling temperature (the policy the trainer scores).
Sampling at temperature T draws from softmax(logits / T) by inverse transform: one uniform u from
the request's generator per token, and the first token whose cumulative probability exceeds u.
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist
import torch.nn.functional as F
from sync import tp_shard

from grader.models.tiny_gpt import TinyGPT, TinyGPTConfig


class BlockPool:
    """The paged KV cache of one engine rank: `num_blocks` blocks of `block_size` positions for
    every layer, keys and values of this rank's kv heads, and a block table per sequence.

    Storage (num_layers, num_blocks * block_size, kv_heads, head_dim): block b's slots are rows
    [b * block_size, (b + 1) * block_size). A sequence reserves, when it is admitted, the blocks
    of every position it may reach (prompt + max_new_tokens): no preemption is ever needed."""

    def __init__(self, num_blocks: int, block_size: int, num_layers: int, kv_heads: int, head_dim: int, dtype) -> None:
        if num_blocks < 1 or block_size < 1:
            raise ValueError(f"num_blocks ({num_blocks}) and block_size ({block_size}) must be at least 1")
        self.block_size = block_size
        shape = (num_layers, num_blocks * block_size, kv_heads, head_dim)
        self.keys, self.values = torch.zeros(shape, dtype=dtype), torch.zeros(shape, dtype=dtype)
        self.free = list(range(num_blocks))
        self.tables: dict[int, list[int]] = {}
        self.lengths: dict[int, int] = {}

    def can_reserve(self, positions: int) -> bool:
        return len(self.free) >= -(-positions // self.block_size)

    def reserve(self, seq: int, positions: int) -> None:
        """Give sequence `seq` the blocks of `positions` positions (lowest free block ids first)."""
        count = -(-positions // self.block_size)
        if count > len(self.free):
            raise RuntimeError(f"out of blocks: sequence {seq} needs {count}, {len(self.free)} are free")
        self.tables[seq], self.free = self.free[:count], self.free[count:]
        self.lengths[seq] = 0

    def release(self, seq: int) -> None:
        self.free = sorted(self.free + self.tables.pop(seq))
        del self.lengths[seq]

    def slots(self, seq: int, start: int, stop: int) -> torch.Tensor:
        """Rows of positions [start, stop) of `seq` in the storage."""
        table, size = self.tables[seq], self.block_size
        return torch.tensor([table[p // size] * size + p % size for p in range(start, stop)], dtype=torch.long)


class Engine:
    """One tensor-parallel rank of an inference engine replica over TinyGPT (see the module
    docstring). Build it with `Engine.from_model(model, tp_rank, tp, group)`; `weights` maps every
    parameter name of TinyGPT to this rank's tp_shard of it."""

    def __init__(
        self,
        config: TinyGPTConfig,
        weights: dict[str, torch.Tensor],
        tp_rank: int = 0,
        tp: int = 1,
        group=None,
        eos_token_id: int | None = None,
        max_batch: int = 8,
        num_blocks: int = 64,
        block_size: int = 4,
    ) -> None:
        if tp < 1 or config.num_heads % tp or config.num_kv_heads % tp or config.mlp_ratio * config.d_model % tp:
            raise ValueError(f"tp={tp} must divide num_heads, num_kv_heads and the MLP's width")
        if not 0 <= tp_rank < tp:
            raise ValueError(f"tp_rank={tp_rank} is not in [0, {tp})")
        if tp > 1 and group is None:
            raise ValueError("tp > 1 needs the replica's process group")
        if max_batch < 1:
            raise ValueError(f"max_batch must be at least 1, got {max_batch}")
        self.config, self.tp_rank, self.tp, self.group = config, tp_rank, tp, group
        self.eos_token_id, self.max_batch = eos_token_id, max_batch
        self.num_blocks, self.block_size = num_blocks, block_size
        self.weights: dict[str, torch.Tensor] = {}
        self.expected = {name: tuple(w.shape) for name, w in weights.items()}
        self.load_weights(weights)

    @classmethod
    def from_model(cls, model: TinyGPT, tp_rank: int = 0, tp: int = 1, group=None, **options) -> Engine:
        """An engine rank holding rank tp_rank's tp_shard of every parameter of `model`."""
        weights = {n: tp_shard(n, p.detach(), tp_rank, tp, model.config) for n, p in model.named_parameters()}
        return cls(model.config, weights, tp_rank, tp, group, **options)

    def load_weights(self, shards_by_name: dict[str, torch.Tensor]) -> None:
        """Replace every weight by the given shard (what sync.sync_weights returns on this rank):
        the same names and shapes as the engine holds. Raises ValueError otherwise."""
        if set(shards_by_name) != set(self.expected):
            missing, extra = set(self.expected) - set(shards_by_name), set(shards_by_name) - set(self.expected)
            raise ValueError(f"load_weights: missing {sorted(missing)}, unexpected {sorted(extra)}")
        for name, shard in shards_by_name.items():
            if tuple(shard.shape) != self.expected[name]:
                raise ValueError(f"load_weights: {name} has shape {tuple(shard.shape)}, expected {self.expected[name]}")
            self.weights[name] = shard.detach().clone()

    # ---- the tensor-parallel forward

    def _sum_partials(self, partial: torch.Tensor) -> torch.Tensor:
        if self.tp > 1:
            dist.all_reduce(partial, group=self.group)
        return partial

    def _forward(self, pool: BlockPool, seqs: list[int], tokens: torch.Tensor) -> torch.Tensor:
        """Logits (batch, new, vocab) of `tokens` (batch, new), sequence seqs[b]'s new tokens,
        each after the positions its cache already holds; stores their keys and values."""
        config, w = self.config, self.weights
        heads, kv_heads, head_dim = config.num_heads // self.tp, config.num_kv_heads // self.tp, config.head_dim
        batch, new = tokens.shape
        starts = torch.tensor([pool.lengths[s] for s in seqs])
        positions = starts[:, None] + torch.arange(new)
        total = int(positions.max()) + 1  # the longest sequence after this step
        # Key j of sequence b is visible to its query at position p when j <= p (j exists then).
        visible = torch.arange(total)[None, None, :] <= positions[:, :, None]  # (batch, new, total)
        rows = [pool.slots(s, 0, int(start) + new) for s, start in zip(seqs, starts)]
        written = [pool.slots(s, int(start), int(start) + new) for s, start in zip(seqs, starts)]
        x = F.embedding(tokens, w["token_embedding.weight"]) + F.embedding(positions, w["position_embedding.weight"])
        for layer in range(config.num_layers):
            p = f"blocks.{layer}."
            h = F.layer_norm(x, (config.d_model,), w[p + "norm_attention.weight"], w[p + "norm_attention.bias"])
            q = (h @ w[p + "attention.query.weight"].T).view(batch, new, heads, head_dim).transpose(1, 2)
            kv = (h @ w[p + "attention.key_value.weight"].T).view(batch, new, 2, kv_heads, head_dim)
            keys = torch.zeros(batch, total, kv_heads, head_dim, dtype=x.dtype)
            values = torch.zeros_like(keys)
            for b in range(batch):
                pool.keys[layer, written[b]] = kv[b, :, 0]
                pool.values[layer, written[b]] = kv[b, :, 1]
                keys[b, : len(rows[b])] = pool.keys[layer, rows[b]]
                values[b, : len(rows[b])] = pool.values[layer, rows[b]]
            group = heads // kv_heads  # query heads per kv head, the same on every rank
            keys = keys.transpose(1, 2).repeat_interleave(group, dim=1)  # (batch, heads, total, dim)
            values = values.transpose(1, 2).repeat_interleave(group, dim=1)
            scores = (q @ keys.transpose(-2, -1)) / math.sqrt(head_dim)
            scores = scores.masked_fill(~visible[:, None], float("-inf"))
            y = (F.softmax(scores, dim=-1) @ values).transpose(1, 2).reshape(batch, new, heads * head_dim)
            x = x + self._sum_partials(y @ w[p + "attention.out.weight"].T)
            h = F.layer_norm(x, (config.d_model,), w[p + "norm_mlp.weight"], w[p + "norm_mlp.bias"])
            hidden = F.gelu(h @ w[p + "mlp.0.weight"].T + w[p + "mlp.0.bias"])
            x = x + self._sum_partials(hidden @ w[p + "mlp.2.weight"].T) + w[p + "mlp.2.bias"]
        for s in seqs:
            pool.lengths[s] += new
        x = F.layer_norm(x, (config.d_model,), w["norm.weight"], w["norm.bias"])
        return x @ w["token_embedding.weight"].T  # the tied head: every rank has the whole vocabulary

    # ---- generation

    @torch.no_grad()
    def generate(
        self, prompts: list[list[int]], max_new_tokens: int, temperature: float, seeds: list[int]
    ) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """For each prompt (a non-empty list of token ids), (tokens, logprobs): up to
        max_new_tokens sampled tokens (long), ending early with the engine's eos_token_id when it
        is sampled (included), and the log-probability of each at temperature 1 (the weights'
        dtype). Request i samples with torch.Generator().manual_seed(seeds[i]). Every rank of
        the replica calls it with the same arguments and gets the same result."""
        if len(seeds) != len(prompts):
            raise ValueError(f"{len(prompts)} prompts but {len(seeds)} seeds")
        if max_new_tokens < 1 or temperature <= 0:
            raise ValueError(f"max_new_tokens ({max_new_tokens}) must be >= 1 and temperature ({temperature}) > 0")
        for prompt in prompts:
            if not prompt or len(prompt) + max_new_tokens > self.config.max_seq_len:
                raise ValueError(
                    f"a prompt of {len(prompt)} tokens plus {max_new_tokens} new ones must fit in "
                    f"max_seq_len={self.config.max_seq_len} (and not be empty)"
                )
        dtype = self.weights["token_embedding.weight"].dtype
        heads = self.config.num_kv_heads // self.tp
        pool = BlockPool(self.num_blocks, self.block_size, self.config.num_layers, heads, self.config.head_dim, dtype)
        generators = [torch.Generator().manual_seed(int(seed)) for seed in seeds]
        out_tokens: list[list[int]] = [[] for _ in prompts]
        out_logprobs: list[list[torch.Tensor]] = [[] for _ in prompts]
        waiting, live = list(range(len(prompts))), []

        def sample(request: int, logits: torch.Tensor) -> None:
            probs = F.softmax(logits / temperature, dim=-1)
            u = torch.rand((), generator=generators[request], dtype=probs.dtype)
            token = min(int((probs.cumsum(-1) <= u).sum()), probs.numel() - 1)
            out_tokens[request].append(token)
            out_logprobs[request].append(F.log_softmax(logits, dim=-1)[token])

        def finished(request: int) -> bool:
            tokens = out_tokens[request]
            return len(tokens) == max_new_tokens or tokens[-1] == self.eos_token_id

        while waiting or live:
            # Admit waiting requests while the batch and the pool have room, then prefill them,
            # those of one prompt length together, and sample their first tokens.
            admitted = []
            while waiting and len(live) + len(admitted) < self.max_batch:
                request = waiting[0]
                if not pool.can_reserve(len(prompts[request]) + max_new_tokens):
                    if not live and not admitted:
                        raise RuntimeError("the block pool cannot hold one request: raise num_blocks")
                    break
                pool.reserve(waiting.pop(0), len(prompts[request]) + max_new_tokens)
                admitted.append(request)
            for length in sorted({len(prompts[r]) for r in admitted}):
                batch = [r for r in admitted if len(prompts[r]) == length]
                logits = self._forward(pool, batch, torch.tensor([list(prompts[r]) for r in batch]))
                for b, request in enumerate(batch):
                    sample(request, logits[b, -1])
            live += admitted
            for request in [r for r in live if finished(r)]:
                live.remove(request)
                pool.release(request)
            if live:  # one decode step: the last token of every live sequence
                last = torch.tensor([[out_tokens[r][-1]] for r in live])
                logits = self._forward(pool, live, last)
                for b, request in enumerate(live):
                    sample(request, logits[b, -1])
                for request in [r for r in live if finished(r)]:
                    live.remove(request)
                    pool.release(request)
        return [
            (torch.tensor(tokens, dtype=torch.long), torch.stack(logprobs))
            for tokens, logprobs in zip(out_tokens, out_logprobs)
        ]
