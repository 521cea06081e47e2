"""Hidden suite: the reference `attention` (MHA, GQA, MQA; causal aligned to the end of the
keys), checked against torch.nn.functional.scaled_dot_product_attention computed in the grader
(enable_gqa, explicit end-aligned causal mask), forward and backward (autograd through SDPA)."""

from __future__ import annotations

import pytest
import torch

from grader.suites.attention.attention_reference import Case, check_against_reference, forward_backward, sdpa
from grader.testing import assert_matches, expect_exception, generator, random_tensor

CASES = [
    Case(2, 4, 4, 37, 37, 16, False, torch.float64),
    Case(1, 4, 2, 50, 50, 32, True, torch.float64),
    Case(2, 4, 1, 3, 41, 64, True, torch.float32),  # MQA decode: 3 new queries over 41 keys
    Case(1, 2, 2, 20, 20, 128, True, torch.float32),
    Case(1, 6, 2, 1, 30, 16, True, torch.float64),  # one decode step sees every key
    # Half precision (the output in q's dtype, not float32), lengths not multiples of 16:
    Case(1, 4, 2, 45, 70, 32, True, torch.bfloat16),
    Case(2, 2, 1, 33, 33, 16, False, torch.float16),
]


@pytest.mark.points(2)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_attention_matches_sdpa(submission, case):
    """Forward against F.scaled_dot_product_attention (enable_gqa, end-aligned causal mask)."""
    q, k, v, _ = case.inputs("attention-forward")
    out = submission.function("attention")(q, k, v, causal=case.causal)
    expected = sdpa(q.double(), k.double(), v.double(), case.causal)
    check_against_reference(
        {"out": out}, {"out": expected}, case.dtype, f"attention on {case.described}", keys=("out",)
    )


@pytest.mark.points(1)
def test_attention_uses_the_given_scale(submission):
    """scale=0.3 instead of 1/sqrt(d), against SDPA with the same scale."""
    gen = generator("attention-scale")
    q, k, v = (random_tensor((1, 2, 9, 16), torch.float64, gen) for _ in range(3))
    out = submission.function("attention")(q, k, v, causal=True, scale=0.3)
    assert_matches(out, sdpa(q, k, v, True, scale=0.3), "attention with scale=0.3", 1e-9, 1e-9)


@pytest.mark.points(3)
@pytest.mark.parametrize("case", CASES[:3], ids=lambda c: c.id)
def test_attention_gradients_match_autograd_through_sdpa(submission, case):
    mine, expected, _ = forward_backward(submission, "attention", case, "attention-grad")
    check_against_reference(mine, expected, case.dtype, f"attention backward on {case.described}")


@pytest.mark.points(1)
def test_attention_rejects_heads_that_are_not_a_multiple_of_kv_heads(submission):
    q, k = torch.randn(1, 3, 4, 16), torch.randn(1, 2, 4, 16)
    expect_exception("ValueError", lambda: submission.function("attention")(q, k, k))
