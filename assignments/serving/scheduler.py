# Your working copy: replace every `raise NotImplementedError` with your implementation.
# (Generated from the course's reference by `python -m grader sync`.)
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
        raise NotImplementedError("implement Scheduler.__init__ (lectures/10-serving.md, section 1)")

    def add_request(
        self,
        request_id: object,
        prompt: list[int],
        max_new_tokens: int,
        temperature: float = 0.0,
        seed: int = 0,
    ) -> None:
        raise NotImplementedError("implement Scheduler.add_request (lectures/10-serving.md, section 1)")

    def step(self) -> list[tuple[object, int]]:
        raise NotImplementedError("implement Scheduler.step (lectures/10-serving.md, section 1)")

    def run_until_done(self) -> dict[object, list[int]]:
        raise NotImplementedError("implement Scheduler.run_until_done (lectures/10-serving.md, section 1)")

    # (Write any helper functions you need here.)


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
