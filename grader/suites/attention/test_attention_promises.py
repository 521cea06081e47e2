"""Hidden suite: the promises of the attention docstrings that the other files leave untested
(tests/spec/promises.toml maps every promise to its tests).

- attention's ValueError for every incompatible shape check_shapes names, one case per test;
- the stable softmax of lecture section 1 (subtract the row maximum: no exponential overflows)
  for attention and FlashAttention, on scores of several hundred in float32, against
  torch.nn.functional.scaled_dot_product_attention in float64 (attention_reference.sdpa);
- cache_bytes_per_token's ValueError for a missing size, and bytes_per_element in every variant,
  against the formulas of lecture section 6;
- MultiHeadLatentAttention.forward_absorbed never forms k or v: its FLOPs (FlopCounterMode in
  the worker) grow with seq^2 at the rate of attention over kv_latent_dim, not head_dim.
"""

from __future__ import annotations

import pytest
import torch

from grader.sandbox import Step
from grader.suites.attention.attention_reference import TOLERANCES, end_aligned_mask, sdpa
from grader.testing import assert_matches, expect_exception, generator

BAD_SHAPES = [
    # (id, q shape, k shape, v shape, causal, why)
    ("k-and-v-differ", (1, 2, 4, 16), (1, 2, 4, 16), (1, 2, 5, 16), False, "k has 4 positions and v 5"),
    ("batch-differs", (2, 2, 4, 16), (1, 2, 4, 16), (1, 2, 4, 16), False, "q has batch 2 and k, v batch 1"),
    ("head-dim-differs", (1, 2, 4, 16), (1, 2, 4, 8), (1, 2, 4, 8), False, "q has head_dim 16 and k, v 8"),
    ("causal-more-queries-than-keys", (1, 2, 6, 16), (1, 2, 4, 16), (1, 2, 4, 16), True, "causal, 6 queries, 4 keys"),
    ("not-4d", (2, 4, 16), (2, 4, 16), (2, 4, 16), False, "3-D q, k and v"),
]


@pytest.mark.points(1)
@pytest.mark.parametrize(("q", "k", "v", "causal", "why"), [c[1:] for c in BAD_SHAPES], ids=[c[0] for c in BAD_SHAPES])
def test_attention_rejects_every_incompatible_shape(submission, q, k, v, causal, why):
    """Docstring: "Raises ValueError for incompatible shapes (see check_shapes)": each of
    check_shapes' conditions alone (the given check_shapes raises all of them; heads that are not
    a multiple of the kv heads are in test_attention_reference)."""
    tensors = [torch.randn(shape) for shape in (q, k, v)]
    try:
        expect_exception("ValueError", lambda: submission.function("attention")(*tensors, causal=causal))
    except AssertionError as error:
        raise AssertionError(f"attention(q {q}, k {k}, v {v}, causal={causal}) ({why}): {error}") from None


def _large_scores(*salt: object) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """float32 q, k, v (GQA 4/2 heads, 9 queries over 13 keys) whose scaled scores reach several
    hundred: exp() of them overflows float32 (largest ~3.4e38 = e^88.7) unless the row maximum is
    subtracted first. q holds multiples of 64 and k holds -1, 0 or 1, so every score (times
    1/sqrt(16)) is exact in float32 and only the softmax itself rounds."""
    gen = generator("large-scores", *salt)
    q = torch.randint(-3, 4, (1, 4, 9, 16), generator=gen).float() * 64
    k = torch.randint(-1, 2, (1, 2, 13, 16), generator=gen).float()
    v = torch.randn(1, 2, 13, 16, generator=gen)
    return q, k, v


@pytest.mark.points(1)
def test_attention_is_stable_for_large_scores(submission):
    """Lecture section 1: the softmax subtracts the row maximum, so no exponential overflows."""
    q, k, v = _large_scores("attention")
    out = submission.function("attention")(q, k, v, causal=True)
    expected = sdpa(q.double(), k.double(), v.double(), True).float()
    assert_matches(
        out,
        expected,
        "attention on float32 scores of several hundred (GQA, causal) vs SDPA in float64: subtract each row's maximum "
        "before exp, or the exponentials overflow to inf and the output turns NaN",
        *TOLERANCES[torch.float32]["out"],
    )


@pytest.mark.points(1)
def test_flash_attention_torch_is_stable_for_large_scores(submission):
    """The online softmax keeps a running maximum (lecture section 3): out and lse stay finite
    and right on scores of several hundred, forward only, small blocks so that the maximum moves."""
    q, k, v = _large_scores("flash")
    out, lse = submission.function("flash_attention_torch")(q, k, v, causal=True, block_q=4, block_k=4)
    expected = sdpa(q.double(), k.double(), v.double(), True).float()
    what = "flash_attention_torch (blocks 4x4) on float32 scores of several hundred (GQA, causal) vs SDPA in float64"
    assert_matches(out, expected, f"{what}: out", *TOLERANCES[torch.float32]["out"])
    scores = q.double() @ k.double().repeat_interleave(2, dim=1).transpose(-2, -1) / 4
    scores = scores.masked_fill(~end_aligned_mask(9, 13), float("-inf"))
    assert_matches(lse, scores.logsumexp(-1).float(), f"{what}: lse", *TOLERANCES[torch.float32]["out"])


@pytest.mark.points(1)
@pytest.mark.parametrize(
    ("variant", "missing"),
    [("gqa", "n_kv_heads"), ("mla", "kv_latent_dim")],
    ids=["gqa-without-n_kv_heads", "mla-without-kv_latent_dim"],
)
def test_cache_bytes_per_token_rejects_a_missing_size(submission, variant, missing):
    """Docstring: "Raises ValueError for an unknown variant or a missing size"."""
    try:
        expect_exception("ValueError", lambda: submission.function("cache_bytes_per_token")(variant, 2, 8, 64))
    except AssertionError as error:
        raise AssertionError(f"cache_bytes_per_token({variant!r}, 2, 8, 64) without {missing}: {error}") from None


ELEMENT_SIZE = [  # (variant, kwargs, bytes per token) for 3 layers, 8 heads of 64, float32 (4 bytes)
    ("mha", {}, 3 * 2 * 8 * 64 * 4),
    ("mqa", {}, 3 * 2 * 64 * 4),
    ("mla", {"kv_latent_dim": 96}, 3 * 96 * 4),
]


@pytest.mark.points(1)
@pytest.mark.parametrize(("variant", "extra", "expected"), ELEMENT_SIZE, ids=[c[0] for c in ELEMENT_SIZE])
def test_cache_bytes_per_token_counts_the_element_size_in_every_variant(submission, variant, extra, expected):
    """bytes_per_element=4 (float32) against the formula of lecture section 6 (gqa is in
    test_attention_mla)."""
    got = submission.function("cache_bytes_per_token")(variant, 3, 8, 64, **extra, bytes_per_element=4)
    assert got == expected, (
        f"cache_bytes_per_token({variant!r}, 3 layers, 8 heads, d=64, {extra or 'no extra size'}, "
        f"bytes_per_element=4): {got}, expected {expected}"
    )


def _absorbed_flops(submission, seq: int) -> int:
    d_model, heads, head_dim, latent = 16, 2, 32, 4
    x = torch.randn(1, seq, d_model, generator=generator("mla-flops", seq))
    steps = [
        Step("MultiHeadLatentAttention", (d_model, heads, head_dim, latent), save_as="mla", send_back=False),
        Step("mla.forward_absorbed", (x,), send_back=False, measure=("flops",)),
    ]
    return submission.script(steps).measurements[0][1]["flops"]


@pytest.mark.points(2)
def test_mla_absorbed_forward_never_forms_k_or_v(submission, record_property):
    """FLOPs of forward_absorbed at seq S, 2S and 3S (2 heads of head_dim 32, kv_latent_dim 4):
    f(S) = c + a S + b S^2, so b = (f(3S) - 2 f(2S) + f(S)) / (2 S^2). Attending over the latent
    (scores and output per head over kv_latent_dim) gives b = 4 * heads * kv_latent_dim = 32;
    rebuilding k and v and attending over head_dim gives 4 * heads * head_dim = 256 (144 when only
    v is rebuilt)."""
    seq = 16
    f1, f2, f3 = (_absorbed_flops(submission, n * seq) for n in (1, 2, 3))
    quadratic = (f3 - 2 * f2 + f1) / (2 * seq**2)
    record_property("flops_per_seq_squared", quadratic)
    latent_rate, head_dim_rate = 4 * 2 * 4, 4 * 2 * 32
    assert quadratic <= 2 * latent_rate, (
        f"forward_absorbed does {quadratic:.0f} FLOPs per seq^2 (2 heads, head_dim 32, kv_latent_dim 4; "
        f"{f1}, {f2} and {f3} FLOPs at seq {seq}, {2 * seq} and {3 * seq}); attention over the latent does "
        f"{latent_rate}, over rebuilt keys and values {head_dim_rate}: fold W_uk into the query and W_uv into "
        f"the output instead of forming k or v"
    )
