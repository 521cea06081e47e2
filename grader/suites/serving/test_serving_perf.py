"""Hidden suite, counted efficiency of the Scheduler: forward calls against the documented
continuous-batching policy (static batching needs many more), prompt tokens computed with
prefix caching (they fall by the shared-prefix fraction), and least-recently-used eviction.

Counts come from the given ServingModel (forward calls, tokens computed and each call's shape).
So that they count everything the scheduler ran, the grader also measures the FLOPs of the whole
run (FlopCounterMode, the "flops" probe, captured before the submission is imported) and holds
them to the FLOPs of the logged forward calls (serving_reference.forward_flops): a model run
outside ServingModel.forward shows as FLOPs no logged call accounts for.
"""

from __future__ import annotations

import pytest
import torch

from grader.suites.serving.serving_reference import (
    CONFIG,
    continuous_forward_calls,
    forward_flops,
    model,
    scheduler_script,
    sequential,
)
from grader.testing import generator

VOCAB = CONFIG["vocab_size"]
FLOPS_SLACK = 1.02  # bookkeeping may add a few FLOPs; a model forward outside the log adds far more


def _tokens(length: int, *salt: object) -> list[int]:
    return torch.randint(0, VOCAB, (length,), generator=generator("serving-perf", length, *salt)).tolist()


def _run(submission, blocks: int, block_size: int, budget: int, events: list[tuple]) -> tuple[dict, dict, int]:
    """(outputs, counts, FLOPs measured around the steps until idle) of one workload; counts
    gains "traced_shapes" and "traced_tokens", the shapes of the forward calls and the tokens
    computed after the workload's explicit steps, while the FLOPs were counted."""
    run = submission.script(scheduler_script(blocks, block_size, budget, events, measure=("flops",)))
    results, figures = run.steps[0], run.measurements[0]
    flops = next(f["flops"] for f in figures if f and "flops" in f)
    before, counts = results[-4], results[-1]
    counts["traced_shapes"] = counts["shapes"][len(before["shapes"]) :]
    counts["traced_tokens"] = counts["tokens_computed"] - before["tokens_computed"]
    return results[-2], counts, flops


def _check_flops(counts: dict, flops: int, record_property) -> None:
    assert counts["forward_calls"] == len(counts["shapes"]), (
        f"the model counted {counts['forward_calls']} forward calls but logged {len(counts['shapes'])}: "
        f"leave the given ServingModel's counters alone"
    )
    expected = forward_flops(counts["traced_shapes"])
    record_property("flops_measured", flops)
    record_property("flops_of_logged_forwards", expected)
    assert flops <= FLOPS_SLACK * expected, (
        f"the run counted {flops:,} FLOPs but the ServingModel.forward calls it logged account for {expected:,}: "
        f"run the model only through model.forward (once per step)"
    )


MIXED = [(6, 2), (6, 14)] * 4  # (prompt length, max_new_tokens): short and long outputs alternate
MIXED_BUDGET = 16


@pytest.mark.perf
@pytest.mark.points(8)
def test_continuous_batching_needs_no_more_forward_calls_than_the_documented_policy(submission, record_property):
    """8 requests, outputs of 2 and 14 tokens, budget 16 tokens per step, blocks to spare: the
    documented policy (serving_reference.continuous_forward_calls) needs 17 forwards; static
    batching, which admits requests only when the whole batch has finished, needs 43."""
    events = [("add", i, _tokens(length, "mixed", i), new) for i, (length, new) in enumerate(MIXED)]
    outputs, counts, flops = _run(submission, 64, 4, MIXED_BUDGET, events)
    net = model()
    for i, (_, new) in enumerate(MIXED):
        assert list(outputs[i]) == sequential(net, events[i][2], new), f"request {i} generated other tokens"
    bound = continuous_forward_calls(MIXED, MIXED_BUDGET)
    record_property("forward_calls", counts["forward_calls"])
    record_property("continuous_batching_forward_calls", bound)
    _check_flops(counts, flops, record_property)
    assert counts["forward_calls"] <= bound, (
        f"the workload took {counts['forward_calls']} forward calls; continuous batching takes {bound}: let "
        f"waiting requests join as soon as finished ones leave, every step, instead of waiting for the batch"
    )


PREFIX_BLOCKS, BLOCK, SUFFIX, SHARERS, NEW = 4, 4, 3, 5, 3


@pytest.mark.perf
@pytest.mark.points(8)
def test_prefix_caching_skips_the_shared_prefix_of_later_requests(submission, record_property):
    """Request 0 (a 16-token prefix + 3 tokens) runs one step; then 5 requests with the same
    prefix and their own 3 tokens join. Prompt tokens computed (tokens computed minus the
    max_new_tokens - 1 decode tokens of each request): 19 + 5 x 3 = 34 with prefix caching,
    6 x 19 = 114 without: the later prompts fall by the shared fraction 16/19."""
    prefix = _tokens(PREFIX_BLOCKS * BLOCK, "shared")
    prompts = [prefix + _tokens(SUFFIX, "own", i) for i in range(SHARERS + 1)]
    events = [("add", 0, prompts[0], NEW), ("step",)]
    events += [("add", i, prompts[i], NEW) for i in range(1, SHARERS + 1)]
    outputs, counts, flops = _run(submission, 64, BLOCK, 64, events)
    net = model()
    for i, prompt in enumerate(prompts):
        assert list(outputs[i]) == sequential(net, prompt, NEW), f"request {i} generated other tokens"
    prefill = counts["tokens_computed"] - (SHARERS + 1) * (NEW - 1)
    with_reuse = len(prompts[0]) + SHARERS * SUFFIX
    without = (SHARERS + 1) * len(prompts[0])
    record_property("prefill_tokens", prefill)
    record_property("prefill_tokens_with_prefix_caching", with_reuse)
    record_property("prefill_tokens_without_reuse", without)
    _check_flops(counts, flops, record_property)
    assert prefill <= with_reuse, (
        f"{prefill} prompt tokens were computed; with prefix caching the 5 later requests reuse the 4 cached "
        f"blocks of the shared 16-token prefix and compute {with_reuse} (without reuse: {without}). Cache full "
        f"blocks under their hash-chain key and let new requests adopt the longest matching chain."
    )


@pytest.mark.perf
@pytest.mark.points(5)
def test_cached_blocks_are_evicted_least_recently_used_first_and_only_when_needed(submission, record_property):
    """8 blocks of 4. A, then B (two 8-token prefixes, each + 1 token, 2 new) finish and leave
    their 2 full blocks each cached (4 blocks held by the cache, 4 free); A is used again. A
    request of 23 unique tokens (6 blocks) needs 2 of the cached ones: LRU evicts B's, not A's.
    Then A + 1 token computes 1 prompt token (counted alone), and B + 1 token all 9."""
    prefix_a, prefix_b = _tokens(8, "lru-a"), _tokens(8, "lru-b")
    events = [("add", "a1", [*prefix_a, 1], 2), ("step",), ("step",), ("add", "b1", [*prefix_b, 2], 2)]
    events += [("step",), ("step",), ("add", "a2", [*prefix_a, 3], 2), ("step",), ("step",)]
    events += [("add", "big", _tokens(23, "lru-big"), 2), ("step",), ("step",), ("counts",)]
    events += [("add", "a3", [*prefix_a, 4], 2), ("step",), ("step",), ("counts",), ("add", "b2", [*prefix_b, 5], 2)]
    run = submission.script(scheduler_script(8, 4, 64, events, measure=("flops",)))
    results = run.steps[0]
    flops = next(f["flops"] for f in run.measurements[0] if f and "flops" in f)
    outputs, counts = results[-2], results[-1]
    before_a3, after_a3 = [r for r in results[2:-4] if isinstance(r, dict)][-2:]
    counts["traced_shapes"] = counts["shapes"][len(results[-4]["shapes"]) :]
    net = model()
    for event in events:
        if event[0] == "add":
            assert list(outputs[event[1]]) == sequential(net, event[2], 2), f"request {event[1]} generated other tokens"
    a3 = after_a3["tokens_computed"] - before_a3["tokens_computed"]
    b2 = counts["tokens_computed"] - after_a3["tokens_computed"]
    record_property("tokens_of_a3", a3)
    record_property("tokens_of_b2", b2)
    _check_flops(counts, flops, record_property)
    assert a3 <= 1 + 1, (
        f"A + 1 token computed {a3} tokens; with least-recently-used eviction A's prefix (used last) survives the "
        f"large request, which evicts B's (used earlier): 1 prompt token and 1 decode token. Evict cached blocks "
        f"only when a block is needed and none is free, least recently used first."
    )
    assert b2 <= 9 + 1, f"B + 1 token computed {b2} tokens; at most its 9 prompt tokens and 1 decode token"
