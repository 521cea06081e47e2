"""A serving engine's scheduler: continuous batching, chunked prefill, preemption by recompute and
automatic prefix caching over a paged KV cache (lecture 10-serving, sections 1 to 5).

Static batching starts a batch and waits until its longest request finishes; the slots of the
requests that finished early stay idle. Continuous (iteration-level) batching, as in Orca (Yu et
al. 2022) and vLLM (Kwon et al. 2023), decides the batch again at every model forward: finished
requests leave, waiting ones join, and one forward mixes prompt chunks (prefill) with the single
tokens of running requests (decode).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from paged import PagedKVCache, ServingModel


class Scheduler:
    """Continuous batching over `model.new_cache(num_blocks, block_size)`, kept as `self.cache`.
    The constructor raises ValueError when max_batch_tokens < 1.

    `add_request(request_id, prompt, max_new_tokens, temperature=0.0, seed=0)`
        Queue a request (prompt: a non-empty list of token ids; request_id: any hashable, used
        as its sequence id in the cache). temperature 0: greedy, the argmax of the logits;
        temperature > 0: each token is one torch.multinomial(softmax(logits / temperature), 1,
        generator=g) with g = torch.Generator().manual_seed(seed), one generator per request.
        A refused request changes nothing. Raises ValueError for an id added before (even one
        finished), an empty prompt, max_new_tokens < 1, or a request larger than the whole cache
        (ceil((len(prompt) + max_new_tokens - 1) / block_size) > num_blocks).
    `step()` -> list of (request_id, tokens computed) in batch order, [] when idle.
        One call of model.forward over the batch of this step (none when idle). A request's
        tokens are its prompt and what it has generated; the ones not yet in the cache are
        computed in order, and when a step computes up to its last token, the logits after it
        choose the next token (a decode step computes that one token). At most
        max_batch_tokens tokens per step: running requests first, oldest first, each taking
        min(its uncomputed tokens, budget left), so a long prompt is prefilled in chunks over
        several steps; then waiting requests are admitted, oldest first, while budget is left
        and the blocks of their chunk are available (if the oldest waiting one does not fit, no
        newer one is admitted). A request that has generated max_new_tokens tokens finishes:
        its blocks are freed at the end of the step.
    `run_until_done()` -> dict request_id -> list of the tokens it generated.
        Steps until no request is waiting or running; the result covers every request added.

    Preemption: when a running request's chunk needs more blocks than are free (after evicting
    cached blocks), the newest running request is preempted: its blocks are freed, and it waits
    again (in arrival order among the waiting) to be recomputed from its prompt and generated
    tokens, which it keeps. Repeat until the chunk fits; when the request preempted is the one
    being scheduled, no more requests are scheduled this step. Requests are served first come,
    first served: with equal lengths they finish in the order they arrived.

    Prefix caching: after each step, every block of a request whose positions are all computed
    is cached under the key (key of the block before it, tuple of its tokens), unless that key
    is cached already; the cache holds a reference to it (cache.retain). A request being
    admitted adopts the longest chain of cached blocks that matches the start of its tokens
    (cache.add_sequence(request_id, blocks)), at most (len(tokens) - 1) // block_size blocks so
    that one token is left to compute; their tokens are not computed again. A cached block that
    only the prefix cache holds is released only when a block is needed and none is free, the
    least recently used first (used: cached or adopted; of blocks used together, the later
    blocks of the chain first).
    """

    def __init__(self, model: ServingModel, num_blocks: int, block_size: int, max_batch_tokens: int) -> None:
        ### BEGIN SOLUTION
        if max_batch_tokens < 1:
            raise ValueError(f"max_batch_tokens must be at least 1, got {max_batch_tokens}")
        self.model, self.block_size, self.max_batch_tokens = model, block_size, max_batch_tokens
        self.cache = model.new_cache(num_blocks, block_size)
        self.requests: dict[object, _Request] = {}
        self.waiting: list[_Request] = []  # by arrival
        self.running: list[_Request] = []  # by arrival
        self.prefix = _PrefixCache(self.cache)
        ### END SOLUTION

    def add_request(
        self,
        request_id: object,
        prompt: list[int],
        max_new_tokens: int,
        temperature: float = 0.0,
        seed: int = 0,
    ) -> None:
        ### BEGIN SOLUTION
        if request_id in self.requests:
            raise ValueError(f"request id {request_id!r} was already added")
        if len(prompt) == 0:
            raise ValueError(f"request {request_id!r} has an empty prompt")
        if max_new_tokens < 1:
            raise ValueError(f"request {request_id!r}: max_new_tokens must be at least 1, got {max_new_tokens}")
        blocks = math.ceil((len(prompt) + max_new_tokens - 1) / self.block_size)
        if blocks > self.cache.num_blocks:
            raise ValueError(
                f"request {request_id!r} needs {blocks} blocks of {self.block_size} positions, "
                f"more than the whole cache ({self.cache.num_blocks} blocks)"
            )
        generator = torch.Generator().manual_seed(seed) if temperature > 0 else None
        request = _Request(request_id, list(prompt), max_new_tokens, len(self.requests), temperature, generator)
        self.requests[request_id] = request
        self.waiting.append(request)
        ### END SOLUTION

    def step(self) -> list[tuple[object, int]]:
        ### BEGIN SOLUTION
        batch = self._schedule()
        if not batch:
            return []
        entries = [(r.id, r.tokens[r.computed : r.computed + n]) for r, n in batch]
        logits = self.model.forward(self.cache, entries)
        for (request, n), row in zip(batch, logits):
            request.computed += n
            if request.computed == len(request.tokens):  # the chunk reached the last token
                request.generated.append(request.choose(row))
            self.prefix.cache_full_blocks(request, self.block_size)
        for request, _ in batch:
            if request.done():
                self.running.remove(request)
                self.cache.free(request.id)
        return [(r.id, n) for r, n in batch]
        ### END SOLUTION

    def run_until_done(self) -> dict[object, list[int]]:
        ### BEGIN SOLUTION
        while self.waiting or self.running:
            self.step()
        return {request_id: list(r.generated) for request_id, r in self.requests.items()}
        ### END SOLUTION

    ### BEGIN SOLUTION
    def _schedule(self) -> list[tuple[_Request, int]]:
        """The batch of this step, with the blocks of every chunk free in the cache."""
        budget, batch, reserved = self.max_batch_tokens, [], 0
        for request in list(self.running):
            if budget == 0 or request not in self.running:
                break
            n = min(request.uncomputed(), budget)
            need = self._blocks_needed(request, n)
            while not self._make_free(reserved + need):
                victim = self.running[-1]  # the newest running request
                self._preempt(victim)
                if victim is request:
                    return batch
            batch.append((request, n))
            budget, reserved = budget - n, reserved + need
        while self.waiting and budget > 0:
            request = self.waiting[0]
            blocks = self.prefix.match(request.tokens, self.block_size)
            n = min(len(request.tokens) - len(blocks) * self.block_size, budget)
            need = math.ceil((len(blocks) * self.block_size + n) / self.block_size) - len(blocks)
            if not self._make_free(reserved + need, keep=blocks):
                break
            self.prefix.touch(blocks)
            self.cache.add_sequence(request.id, blocks)
            request.computed = len(blocks) * self.block_size
            self.waiting.pop(0)
            self.running.append(request)
            batch.append((request, n))
            budget, reserved = budget - n, reserved + need
        return batch

    def _blocks_needed(self, request: _Request, n: int) -> int:
        return math.ceil((request.computed + n) / self.block_size) - len(self.cache.block_table(request.id))

    def _make_free(self, count: int, keep: list[int] = ()) -> bool:
        """Evict cached blocks until `count` are free; False (evicting nothing) if that is impossible."""
        if self.cache.num_free_blocks() + self.prefix.evictable(exclude=keep) < count:
            return False
        while self.cache.num_free_blocks() < count:
            self.prefix.evict_one(exclude=keep)
        return True

    def _preempt(self, request: _Request) -> None:
        self.running.remove(request)
        self.cache.free(request.id)
        request.computed = 0
        self.waiting.append(request)
        self.waiting.sort(key=lambda r: r.arrival)


@dataclass(eq=False)
class _Request:
    id: object
    prompt: list[int]
    max_new_tokens: int
    arrival: int
    temperature: float
    generator: torch.Generator | None
    generated: list[int] = field(default_factory=list)
    computed: int = 0  # tokens whose keys and values are in the cache

    @property
    def tokens(self) -> list[int]:
        return self.prompt + self.generated

    def uncomputed(self) -> int:
        return len(self.prompt) + len(self.generated) - self.computed

    def done(self) -> bool:
        return len(self.generated) == self.max_new_tokens

    def choose(self, logits: torch.Tensor) -> int:
        if self.temperature == 0:
            return int(logits.argmax())
        probs = torch.softmax(logits / self.temperature, dim=-1)
        return int(torch.multinomial(probs, 1, generator=self.generator))


class _PrefixCache:
    """Full blocks by hash-chain key, each holding one reference; LRU order by a use counter."""

    def __init__(self, cache: PagedKVCache) -> None:
        self.cache = cache
        self.block_of: dict[tuple, int] = {}  # key -> block
        self.key_of: dict[int, tuple] = {}  # block -> key
        self.last_used: dict[int, int] = {}  # block -> tick
        self.clock = 0

    @staticmethod
    def keys(tokens: list[int], block_size: int, count: int):
        key: tuple = ()
        for i in range(count):
            key = (key, tuple(tokens[i * block_size : (i + 1) * block_size]))
            yield key

    def match(self, tokens: list[int], block_size: int) -> list[int]:
        blocks = []
        for key in self.keys(tokens, block_size, (len(tokens) - 1) // block_size):
            if key not in self.block_of:
                break
            blocks.append(self.block_of[key])
        return blocks

    def touch(self, blocks: list[int]) -> None:
        for block in reversed(blocks):  # the chain's later blocks count as used earlier
            self.clock += 1
            self.last_used[block] = self.clock

    def cache_full_blocks(self, request: _Request, block_size: int) -> None:
        table = self.cache.block_table(request.id)
        full = request.computed // block_size
        added = []
        for i, key in enumerate(self.keys(request.tokens, block_size, full)):
            block = table[i]
            if key in self.block_of or block in self.key_of:
                continue
            self.block_of[key], self.key_of[block] = block, key
            self.cache.retain(block)
            added.append(block)
        self.touch(added)

    def evictable(self, exclude: list[int] = ()) -> int:
        return sum(1 for b in self.key_of if self.cache.ref_count(b) == 1 and b not in exclude)

    def evict_one(self, exclude: list[int] = ()) -> None:
        candidates = [b for b in self.key_of if self.cache.ref_count(b) == 1 and b not in exclude]
        block = min(candidates, key=self.last_used.__getitem__)
        del self.block_of[self.key_of.pop(block)], self.last_used[block]
        self.cache.release(block)


### END SOLUTION


def trace_steps(scheduler: Scheduler, max_steps: int = 10_000) -> list[list[tuple[object, int]]]:
    """Given (the grader uses it): call scheduler.step() until it returns [] (idle) and return
    what every step returned; RuntimeError after max_steps steps (a scheduler that never idles)."""
    trace = []
    for _ in range(max_steps):
        batch = scheduler.step()
        if not batch:
            return trace
        trace.append([tuple(entry) for entry in batch])
    raise RuntimeError(f"the scheduler was still busy after {max_steps} steps")
