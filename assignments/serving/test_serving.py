"""Public tests for the serving module: run them while you work with

    pytest assignments/serving             (add -s to see what your code prints)
    pytest assignments/serving -k speculative

Your code runs in a worker process, never inside pytest; the references here run the given
TinyGPT (grader/models/tiny_gpt.py) on one request at a time, without a cache. The hidden suite
checks more: random workloads drawn by Hypothesis (arrivals, chunked prompts, preemption, shared
prefixes, sampling), the forward calls and prompt tokens a workload costs, LRU eviction, the
distribution of speculative sampling against the exact target distribution (chi-square), and
target calls per token against expected_tokens_per_step; `make grade` gives the score.
"""

from __future__ import annotations

import torch

from grader.models.tiny_gpt import TinyGPT, TinyGPTConfig
from grader.sandbox import Saved, Step
from grader.testing import expect_exception

CONFIG = {"vocab_size": 97, "max_seq_len": 256, "num_layers": 2, "d_model": 32, "num_heads": 4, "num_kv_heads": 2}


@torch.no_grad()
def alone(prompt: list[int], new: int, seed: int = 3) -> list[int]:
    """Greedy generation of one request, recomputing the whole sequence every step."""
    net = TinyGPT.from_seed(TinyGPTConfig(**CONFIG), seed, torch.float64)
    ids = torch.tensor([prompt])
    for _ in range(new):
        ids = torch.cat([ids, net(ids)[:, -1].argmax(-1, keepdim=True)], 1)
    return ids[0, len(prompt) :].tolist()


def _scheduler(blocks: int, block_size: int, budget: int) -> list[Step]:
    return [
        Step("build_model", (CONFIG, 3, "float64"), save_as="model", send_back=False),
        Step("Scheduler", (Saved("model"), blocks, block_size, budget), save_as="scheduler", send_back=False),
    ]


PROMPTS = {"a": [5, 17, 42, 8, 90, 3, 61], "b": [5, 17, 42, 8, 11], "c": [70, 2]}
NEW = {"a": 4, "b": 6, "c": 3}


def test_continuous_batching_gives_each_request_its_own_tokens(submission):
    steps = _scheduler(32, 4, 16)
    steps += [Step("scheduler.add_request", (r, PROMPTS[r], NEW[r])) for r in ("a", "b")]
    steps += [Step("scheduler.step"), Step("scheduler.add_request", ("c", PROMPTS["c"], NEW["c"]))]
    steps += [Step("scheduler.run_until_done"), Step("model.counts")]
    results = submission.script(steps).steps[0]
    first_step, outputs, counts = results[4], results[6], results[7]
    assert [tuple(e) for e in first_step] == [("a", 7), ("b", 5)], f"the first step prefills a and b: {first_step}"
    for r in PROMPTS:
        assert list(outputs[r]) == alone(PROMPTS[r], NEW[r]), f"request {r}: {outputs[r]}"
    assert counts["forward_calls"] == 6, f"b's 6 tokens need 6 steps, c joins on the way: {counts['forward_calls']}"


def test_long_prompts_are_prefilled_in_chunks(submission):
    steps = [*_scheduler(32, 4, 3), Step("scheduler.add_request", ("a", PROMPTS["a"], 2))]
    steps += [Step("scheduler.step") for _ in range(4)] + [Step("scheduler.run_until_done")]
    results = submission.script(steps).steps[0]
    assert [[tuple(e) for e in b] for b in results[3:7]] == [[("a", 3)], [("a", 3)], [("a", 1)], [("a", 1)]]
    assert list(results[7]["a"]) == alone(PROMPTS["a"], 2)


def test_a_duplicate_id_is_refused(submission):
    steps = [*_scheduler(32, 4, 16), Step("scheduler.add_request", ("a", [1, 2], 2))]
    steps.append(Step("scheduler.add_request", ("a", [3], 1)))
    expect_exception("ValueError", lambda: submission.script(steps))


def test_expected_tokens_per_step_of_the_paper(submission):
    expected_tokens = submission.function("expected_tokens_per_step")
    assert abs(expected_tokens(0.8, 4) - (1 - 0.8**5) / 0.2) < 1e-12
    assert expected_tokens(1.0, 3) == 4


def test_greedy_speculative_decoding_equals_the_target_alone(submission):
    prompt = torch.tensor([4, 8, 15, 16])
    steps = [
        Step("build_tiny_gpt", (CONFIG, 3), save_as="target", send_back=False),
        Step("build_tiny_gpt", (CONFIG, 5), save_as="draft", send_back=False),
        Step("speculative_generate", (Saved("target"), Saved("draft"), prompt, 3, 8)),
    ]
    tokens = submission.script(steps).steps[0][-1]
    assert tokens.tolist() == alone(prompt.tolist(), 8)


def test_a_draft_that_always_agrees_needs_one_target_call_per_gamma_plus_one_tokens(submission):
    probs = torch.tensor([[0.6, 0.4], [0.3, 0.7]])
    steps = [
        Step("BigramModel", (probs,), save_as="target", send_back=False),
        Step("BigramModel", (probs,), save_as="draft", send_back=False),
        Step("count_target_calls", (Saved("target"), Saved("draft"), torch.tensor([0]), 3, 12, 0)),
    ]
    result = submission.script(steps).steps[0][-1]
    assert result["target_calls"] == 3, f"12 tokens at 4 per step (3 drafts + bonus): {result['target_calls']} calls"
