"""Hidden suite: multi-head latent attention and KV-cache sizes.

The naive forward is checked against a reference the grader builds from the module's weights
with torch.nn.functional.scaled_dot_product_attention; the absorbed forward must agree with it.
Cache sizes are checked against the formulas of lecture section 6."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from grader.sandbox import Step
from grader.testing import assert_matches, expect_exception, generator, random_tensor

D_MODEL, HEADS, HEAD_DIM, LATENT = 48, 4, 16, 12


def _weights(gen: torch.Generator) -> dict[str, torch.Tensor]:
    shapes = {
        "w_q.weight": (HEADS * HEAD_DIM, D_MODEL),
        "w_dkv.weight": (LATENT, D_MODEL),
        "w_uk.weight": (HEADS * HEAD_DIM, LATENT),
        "w_uv.weight": (HEADS * HEAD_DIM, LATENT),
        "w_o.weight": (D_MODEL, HEADS * HEAD_DIM),
    }
    return {name: random_tensor(shape, torch.float64, gen) / math.sqrt(shape[1]) for name, shape in shapes.items()}


def _reference(w: dict[str, torch.Tensor], x: torch.Tensor, causal: bool) -> torch.Tensor:
    """MLA without RoPE, written out: k, v rebuilt from the latent, then SDPA per head."""
    split = lambda t: t.unflatten(-1, (HEADS, HEAD_DIM)).transpose(1, 2)  # noqa: E731
    c = x @ w["w_dkv.weight"].T
    q, k, v = split(x @ w["w_q.weight"].T), split(c @ w["w_uk.weight"].T), split(c @ w["w_uv.weight"].T)
    out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return out.transpose(1, 2).flatten(2) @ w["w_o.weight"].T


def _run(submission, weights, x, causal):
    steps = [
        Step("MultiHeadLatentAttention", (D_MODEL, HEADS, HEAD_DIM, LATENT), save_as="mla", send_back=False),
        Step("mla.double", send_back=False),
        Step("mla.load_state_dict", (weights,), send_back=False),
        Step("mla.forward", (x,), {"causal": causal}),
        Step("mla.forward_absorbed", (x,), {"causal": causal}),
    ]
    return submission.script(steps).steps[0][3:]


@pytest.mark.points(3)
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
def test_mla_naive_forward_matches_sdpa_on_the_same_weights(submission, causal):
    gen = generator("mla-naive", causal)
    weights, x = _weights(gen), random_tensor((2, 11, D_MODEL), torch.float64, gen)
    naive, _ = _run(submission, weights, x, causal)
    assert_matches(naive, _reference(weights, x, causal), "MultiHeadLatentAttention.forward", 1e-9, 1e-9)


@pytest.mark.points(4)
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
def test_mla_absorbed_forward_agrees_with_the_naive_one(submission, causal):
    gen = generator("mla-absorbed", causal)
    weights, x = _weights(gen), random_tensor((2, 13, D_MODEL), torch.float64, gen)
    naive, absorbed = _run(submission, weights, x, causal)
    assert_matches(absorbed, _reference(weights, x, causal), "MultiHeadLatentAttention.forward_absorbed", 1e-9, 1e-9)
    assert_matches(absorbed, naive, "forward_absorbed against your forward", 1e-9, 1e-9)


FORMULAS = [  # (variant, kwargs, bytes per token): Llama-2-7B-like shapes, 32 layers, bf16
    ("mha", {}, 32 * 2 * 32 * 128 * 2),
    ("gqa", {"n_kv_heads": 8}, 32 * 2 * 8 * 128 * 2),
    ("mqa", {}, 32 * 2 * 128 * 2),
    ("mla", {"kv_latent_dim": 512}, 32 * 512 * 2),
]


@pytest.mark.points(1)
@pytest.mark.parametrize(("variant", "extra", "expected"), FORMULAS, ids=[f[0] for f in FORMULAS])
def test_cache_bytes_per_token_matches_the_formula(submission, variant, extra, expected):
    got = submission.function("cache_bytes_per_token")(variant, 32, 32, 128, **extra)
    assert got == expected, (
        f"cache_bytes_per_token({variant!r}, 32 layers, 32 heads, d=128): {got}, expected {expected}"
    )


@pytest.mark.points(1)
def test_cache_bytes_per_token_counts_the_element_size(submission):
    got = submission.function("cache_bytes_per_token")("gqa", 2, 8, 64, n_kv_heads=2, bytes_per_element=4)
    assert got == 2 * 2 * 2 * 64 * 4, f"gqa in float32 (4 bytes): {got}, expected {2 * 2 * 2 * 64 * 4}"


@pytest.mark.points(1)
def test_cache_bytes_per_token_rejects_an_unknown_variant(submission):
    expect_exception("ValueError", lambda: submission.function("cache_bytes_per_token")("mxa", 1, 8, 64))
