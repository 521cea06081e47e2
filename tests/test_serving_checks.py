"""Module serving: every counted check both ways (the reference passes, a wasteful or wrong
variant fails while its outputs stay right: the counted checks compare every request's tokens
with sequential generation before they count), the FLOP cross-check is not blind, and the
chi-square test of speculative sampling separates the reference from an inverted acceptance test."""

from __future__ import annotations

import pytest
from conftest import build_variant, by_name, grade_json, module_results

FORWARD_CALLS = "test_continuous_batching_needs_no_more_forward_calls_than_the_documented_policy"
PREFIX = "test_prefix_caching_skips_the_shared_prefix_of_later_requests"
LRU = "test_cached_blocks_are_evicted_least_recently_used_first_and_only_when_needed"
CHI_SQUARE = "test_speculative_sampling_matches_the_target_distribution_over_sequences"
CHI_CASES = ("spread-residual-gamma2-horizon3", "draft-misses-tokens-gamma3-horizon2")
TARGET_CALLS = "test_target_calls_per_token_fall_as_expected_tokens_per_step_says"
ALPHAS = ("alpha-0.5", "alpha-0.9")
GREEDY = "test_greedy_speculative_decoding_equals_greedy_decoding_of_the_target"


@pytest.fixture(scope="module")
def reference(solutions_results) -> dict:
    return module_results(solutions_results, "serving")


def _grade(tmp_path, variant: str, select: str) -> dict[str, dict]:
    submission = build_variant("serving", variant, tmp_path / "submission")
    return by_name(grade_json(submission, "serving", "--select", select, out=tmp_path / "r.json"))


def test_reference_passes_every_counted_check_and_the_flop_count_is_not_blind(reference):
    names = [FORWARD_CALLS, PREFIX, LRU] + [f"{CHI_SQUARE}[{c}]" for c in CHI_CASES]
    names += [f"{TARGET_CALLS}[{a}]" for a in ALPHAS]
    for name in names:
        assert reference[name]["status"] == "passed", f"{name}: {reference[name]['output']}"
    calls = reference[FORWARD_CALLS]["extra_data"]
    assert calls["forward_calls"] == calls["continuous_batching_forward_calls"] == 17, calls
    for name in (FORWARD_CALLS, PREFIX, LRU):
        data = reference[name]["extra_data"]
        assert data["flops_measured"] == data["flops_of_logged_forwards"] > 100_000, (name, data)
    prefix = reference[PREFIX]["extra_data"]
    assert prefix["prefill_tokens"] == prefix["prefill_tokens_with_prefix_caching"] == 34, prefix
    lru = reference[LRU]["extra_data"]
    assert (lru["tokens_of_a3"], lru["tokens_of_b2"]) == (2, 10), lru
    for case in CHI_CASES:
        assert reference[f"{CHI_SQUARE}[{case}]"]["extra_data"]["p_value"] > 0.01


def test_static_batching_is_correct_but_needs_more_forward_calls(tmp_path):
    tests = _grade(tmp_path, "static_batching", "forward_calls")
    test = tests[FORWARD_CALLS]
    assert test["status"] == "failed", test["output"]
    assert "continuous batching takes 17" in test["output"], test["output"]
    assert test["extra_data"]["forward_calls"] >= 30, test["extra_data"]  # 43: a batch waits for its longest


def test_no_prefix_reuse_is_correct_but_computes_every_prompt_in_full(tmp_path):
    tests = _grade(tmp_path, "no_prefix_reuse", "shared_prefix_of_later_requests or evicted")
    for name in (PREFIX, LRU):
        assert tests[name]["status"] == "failed", tests[name]["output"]
    assert tests[PREFIX]["extra_data"]["prefill_tokens"] == 114, tests[PREFIX]["extra_data"]
    assert "hash-chain key" in tests[PREFIX]["output"]


def test_one_target_call_per_drafted_token_fails_the_call_count(tmp_path):
    tests = _grade(tmp_path, "target_call_per_token", "target_calls or greedy_decoding")
    for alpha in ALPHAS:
        test = tests[f"{TARGET_CALLS}[{alpha}]"]
        assert test["status"] == "failed", test["output"]
        assert test["extra_data"]["tokens_per_target_call"] <= 1.05, test["extra_data"]
        assert "ONE target call per step" in test["output"]
    assert all(t["status"] == "passed" for name, t in tests.items() if GREEDY in name)


def test_accepting_when_q_exceeds_p_fails_the_chi_square_test(tmp_path):
    tests = _grade(tmp_path, "accept_when_q_exceeds_p", "distribution_over_sequences or greedy_decoding")
    for case in CHI_CASES:
        test = tests[f"{CHI_SQUARE}[{case}]"]
        assert test["status"] == "failed", test["output"]
        assert test["extra_data"]["p_value"] < 1e-8, test["extra_data"]
        assert "min(1, p(x)/q(x))" in test["output"]
    assert all(t["status"] == "passed" for name, t in tests.items() if GREEDY in name)
