"""Hidden suite, performance: counted FLOPs of one decode step, and tokens per second against
generation by recomputation, measured in the same run.

FLOPs come from torch.utils.flop_counter.FlopCounterMode (the "flops" probe) around the
student's generate: one decode step = generate(prompt, 2 tokens) - generate(prompt, 1 token),
which share the same prefill. With a cache, a decode step costs c + a * L (c: the layers applied
to one token, a: attention over one cached position); recomputing costs the whole forward pass,
b * L + a * L^2. The grader counts the reference decode step (the given model and a trusted
cache) at L and 2L in its own process, which gives c and a exactly.
"""

from __future__ import annotations

import itertools

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from grader.perf import best_ratio, interleaved_ratio, require_reliable
from grader.sandbox import CallResult, Saved, Step
from grader.suites.kv_cache.kv_cache_reference import CONFIG, DenseCache, model
from grader.testing import generator

L = 256  # and 2L = 512
# Attention part of a decode step, (f(2L) - c) / (f(L) - c): 2 with a cache; recomputing
# measures 2.8 here (4 once L^2 dominates). 2.3 leaves room for bookkeeping FLOPs.
ATTENTION_GROWTH_LIMIT = 2.3
# A decode step may cost at most 1.25x the reference's; recomputing costs ~L times more.
DECODE_FLOPS_SLACK = 1.25
CONTEXT, NEW_TOKENS = 512, 16
# Timed on TinyGPT of width 128 (else the same): at width 64 a cached step is mostly Python
# overhead and the speed-up swings from 2.5x to 6x with the machine's load. At 128 the
# reference measures 5-10x the tokens per second of recomputation (prefill included); a
# submission that recomputes measures ~1x.
TIMED_CONFIG = {**CONFIG, "d_model": 128}
SPEEDUP_LIMIT = 2.0


def _prompt(length: int, *salt: object) -> torch.Tensor:
    return torch.randint(0, 97, (1, length), generator=generator("perf-prompt", length, *salt))


@torch.no_grad()
def reference_decode_flops(length: int) -> int:
    """FLOPs of one decode step after `length` positions, with the given model and a trusted cache."""
    net, cache = model(0), DenseCache(CONFIG["num_layers"])
    net(_prompt(length), cache=cache)
    counter = FlopCounterMode(display=False)
    with counter:
        net(torch.zeros(1, 1, dtype=torch.long), cache=cache)
    return counter.get_total_flops()


def student_decode_flops(submission, lengths: tuple[int, ...]) -> dict[int, int]:
    steps = [Step("build_model", (CONFIG, 0, "float32"), save_as="model", send_back=False)]
    for length in lengths:
        for new in (1, 2):
            steps.append(Step("generate", (Saved("model"), _prompt(length), new), send_back=False, measure=("flops",)))
    figures = submission.script(steps).measurements[0][1:]
    return {n: figures[2 * i + 1]["flops"] - figures[2 * i]["flops"] for i, n in enumerate(lengths)}


@pytest.mark.perf
@pytest.mark.points(8)
def test_decode_step_attention_flops_grow_linearly_with_context(submission, record_property):
    """(f(2L) - c) / (f(L) - c) <= 2.3 with c the reference's per-token cost: 2 cached, ~3-4 recomputed."""
    ref = {n: reference_decode_flops(n) for n in (L, 2 * L)}
    constant = 2 * ref[L] - ref[2 * L]  # c, the part of a decode step that does not grow with L
    got = student_decode_flops(submission, (L, 2 * L))
    record_property("decode_flops", {str(k): v for k, v in got.items()})
    record_property("reference_decode_flops", {str(k): v for k, v in ref.items()})
    assert got[L] > constant, (
        f"one decode step at context {L} counted {got[L]:,} FLOPs, fewer than the layers on one token "
        f"({constant:,}): generate(..., 2) must run one more model call than generate(..., 1)"
    )
    growth = (got[2 * L] - constant) / (got[L] - constant)
    record_property("attention_flops_growth", round(growth, 3))
    assert growth <= ATTENTION_GROWTH_LIMIT, (
        f"the attention FLOPs of one decode step grew {growth:.2f}x from context {L} to {2 * L}; with a KV "
        f"cache they grow 2x (one new query against L cached keys), recomputing the sequence grows them ~4x. "
        f"The limit is {ATTENTION_GROWTH_LIMIT}x: feed only the new token and reuse the cached keys and values."
    )


@pytest.mark.perf
@pytest.mark.points(6)
def test_decode_step_flops_at_most_a_cached_step(submission, record_property):
    """FLOPs of one decode step at context 2L <= 1.25x the reference's (given model, trusted cache)."""
    reference = reference_decode_flops(2 * L)
    got = student_decode_flops(submission, (2 * L,))[2 * L]
    record_property("decode_flops_ratio", round(got / reference, 3))
    assert got <= DECODE_FLOPS_SLACK * reference, (
        f"one decode step at context {2 * L} counted {got:,} FLOPs, {got / reference:.1f}x a cached step "
        f"({reference:,}); the limit is {DECODE_FLOPS_SLACK}x. Run the model on the newest token only."
    )


@pytest.mark.perf
@pytest.mark.points(8)
def test_cached_generation_at_least_2x_the_tokens_per_second_of_recomputation(submission, library, record_property):
    """Prompt of 512, 16 new tokens, TinyGPT of width 128: time(cached generate) / time(recomputing
    reference) <= 0.5, the reference being the given model run on the whole sequence every step,
    in a trusted worker."""
    prompt = _prompt(CONTEXT)
    rounds = itertools.count()  # a fresh prompt every round: a remembered answer costs no time

    def candidate() -> CallResult:
        steps = [
            Step("build_model", (TIMED_CONFIG, 0, "float32"), save_as="model", send_back=False),
            Step("generate", (Saved("model"), _prompt(CONTEXT, next(rounds)), NEW_TOKENS), send_back=False),
        ]
        return submission.script(steps)

    def reference() -> CallResult:
        target = "grader.suites.kv_cache.kv_cache_reference:generate_uncached"
        return library.run(target, (0, prompt, NEW_TOKENS, TIMED_CONFIG), return_result=False)

    limit = 1 / SPEEDUP_LIMIT
    ratio = best_ratio(lambda: interleaved_ratio(candidate, reference, rounds=5), limit)
    record_property("speedup_vs_recomputation", round(1 / ratio.ratio, 2))
    record_property("cached_s", round(ratio.candidate_s, 4))
    record_property("recomputation_s", round(ratio.reference_s, 4))
    require_reliable(ratio)
    assert ratio.ratio <= limit, (
        f"generating {NEW_TOKENS} tokens after a prompt of {CONTEXT} took {ratio.candidate_s * 1e3:.0f} ms, "
        f"{1 / ratio.ratio:.1f}x faster than recomputing the sequence every step ({ratio.reference_s * 1e3:.0f} ms); "
        f"a KV cache must be at least {SPEEDUP_LIMIT:g}x faster."
    )
