"""Hidden suite: FP8 against torch's own float8_e4m3fn / float8_e5m2 casts (bit for bit after
scaling), NF4 against the published QLoRA code table and the blockwise absmax definition,
sqnr_db against its formula, and distillation_loss against torch.nn.functional.kl_div and
cross_entropy."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from grader.suites.quantization import reference
from grader.testing import assert_matches, expect_exception, generator

FP8 = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}


def fp8_inputs(salt: str) -> list[torch.Tensor]:
    gen = generator("fp8", salt)
    return [
        torch.randn(64, 33, generator=gen),
        torch.randn(1000, generator=gen) * 1e-4,
        (torch.randn(17, 9, generator=gen) * 300).bfloat16(),
        torch.randn(5, generator=gen) / torch.rand(5, generator=gen),  # heavy tails
    ]


@pytest.mark.points(4)
@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
def test_fp8_matches_torch_float8_cast_bit_for_bit(submission, fmt):
    """Against torch's float8 casting: scale = max|x| / finfo.max, data = (x / scale).to(float8)."""
    dtype = FP8[fmt]
    for x in fp8_inputs(fmt):
        data, scale = submission.function("quantize_fp8")(x, fmt)
        assert data.dtype == dtype, f"quantize_fp8(fmt={fmt!r}) returned {data.dtype}, expected {dtype}"
        assert tuple(data.shape) == tuple(x.shape), f"data has shape {tuple(data.shape)}, expected {tuple(x.shape)}"
        expected_scale = x.float().abs().amax() / torch.finfo(dtype).max
        assert_matches(
            scale.float().reshape(()), expected_scale, f"{fmt}: scale = max|x| / {torch.finfo(dtype).max:g}", rtol=1e-6
        )
        expected = (x.float() / scale.float()).to(dtype)
        assert_matches(
            data.view(torch.uint8), expected.view(torch.uint8), f"{fmt}: the bits of (x / scale).to({dtype})"
        )


@pytest.mark.points(1)
@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
def test_fp8_uses_the_whole_range_and_handles_zeros(submission, fmt):
    dtype = FP8[fmt]
    data, _ = submission.function("quantize_fp8")(torch.tensor([-3.0, 0.5, 0.0]), fmt)
    assert data.float().abs().max().item() == torch.finfo(dtype).max, (
        "the largest magnitude must map to the format's maximum"
    )
    data, scale = submission.function("quantize_fp8")(torch.zeros(4), fmt)
    assert math.isfinite(float(scale)) and not data.float().isnan().any(), "an all-zero tensor must not give NaN"


@pytest.mark.points(1)
@pytest.mark.parametrize(
    "x, fmt",
    [(torch.tensor([1.0, float("nan")]), "e4m3"), (torch.tensor([float("inf")]), "e5m2"), (torch.ones(3), "e3m4")],
    ids=["nan", "inf", "unknown-format"],
)
def test_fp8_rejects_bad_input_with_value_error(submission, x, fmt):
    expect_exception("ValueError", lambda: submission.function("quantize_fp8")(x, fmt))


@pytest.mark.points(4)
@pytest.mark.parametrize(("shape", "block_size"), [((8, 64), 64), ((1000,), 64), ((7, 9), 16), ((3,), 64)])
def test_nf4_picks_the_nearest_published_code_per_absmax_block(submission, shape, block_size):
    """absmax per block of consecutive elements, the nearest of QLoRA's 16 code values."""
    x = torch.randn(shape, generator=generator("nf4", shape)) * 0.05
    numel = x.numel()
    codes, absmax = submission.function("quantize_nf4")(x, block_size)
    blocks = math.ceil(numel / block_size)
    flat = x.reshape(-1)
    padded = torch.cat([flat, flat.new_zeros(blocks * block_size - numel)]).reshape(blocks, -1)
    assert_matches(absmax.float(), padded.abs().amax(1), "absmax: max |x| of each block of consecutive elements")
    assert codes.dtype == torch.uint8 and codes.numel() == (numel + 1) // 2, (
        f"codes must be {(numel + 1) // 2} uint8 bytes (two indices per byte), got {codes.numel()} {codes.dtype}"
    )
    index = reference.unpack(codes, numel, signed=False)
    normalized = (padded / padded.abs().amax(1, keepdim=True)).reshape(-1)[:numel]
    chosen = (normalized - reference.NF4[index]).abs()
    best = (normalized[:, None] - reference.NF4[None, :]).abs().min(1).values
    bad = chosen > best + 1e-6
    assert not bad.any(), (
        f"{int(bad.sum())} of {numel} elements do not use the nearest NF4 code, e.g. x/absmax = "
        f"{normalized[bad][0].item():.4f} got code {reference.NF4[index[bad][0]].item():.4f}"
    )
    x_hat = submission.function("dequantize_nf4")(codes, absmax, shape, block_size)
    block = torch.arange(numel) // block_size
    expected = (reference.NF4[index] * absmax.float()[block]).reshape(shape)
    assert_matches(x_hat, expected, "dequantize_nf4: code value * absmax of the block", 1e-6, 1e-9)


@pytest.mark.points(1)
def test_nf4_block_of_zeros_is_exact_and_bad_input_is_rejected(submission):
    x = torch.cat([torch.zeros(64), torch.randn(64, generator=generator("nf4-zero"))])
    codes, absmax = submission.function("quantize_nf4")(x, 64)
    x_hat = submission.function("dequantize_nf4")(codes, absmax, (128,), 64)
    assert_matches(x_hat[:64], torch.zeros(64), "a block of zeros after the round trip")
    expect_exception("ValueError", lambda: submission.function("quantize_nf4")(torch.tensor([float("nan")]), 64))
    expect_exception("ValueError", lambda: submission.function("quantize_nf4")(torch.ones(8), 0))


@pytest.mark.points(2)
def test_sqnr_db_matches_the_formula(submission):
    gen = generator("sqnr")
    x = torch.randn(300, generator=gen)
    for noise in (1e-1, 1e-3):
        x_hat = x + noise * torch.randn(300, generator=gen)
        got = submission.function("sqnr_db")(x, x_hat)
        expected = reference.sqnr_db(x, x_hat)
        assert got == pytest.approx(expected, rel=1e-6), (
            f"sqnr_db returned {got}, expected 10 log10(sum x^2 / sum (x - x_hat)^2) = {expected}"
        )
    assert submission.function("sqnr_db")(x, x.clone()) == float("inf"), "sqnr_db(x, x) must be inf"


@pytest.mark.points(1)
def test_sqnr_db_is_inf_for_an_exact_zero_tensor_and_sums_in_float64(submission):
    """x_hat equal to an all-zero x is still exact: inf, not 0/0. And the sums are float64's:
    float16 values of 300 square to 9e4, past float16's largest number."""
    zeros = torch.zeros(8)
    got = submission.function("sqnr_db")(zeros, zeros.clone())
    assert got == float("inf"), f"sqnr_db of an all-zero x reproduced exactly returned {got}, expected inf"
    x = torch.full((64,), 300.0, dtype=torch.float16)
    x_hat = x + 1
    got = submission.function("sqnr_db")(x, x_hat)
    expected = 10 * math.log10((300.0**2 * 64) / 64)
    assert got == pytest.approx(expected, rel=1e-9), (
        f"sqnr_db of float16 values of 300, off by 1: returned {got}, expected {expected:.6f} (sums in float64)"
    )


def distillation_reference(student, teacher, labels, temperature, alpha):
    """With torch.nn.functional.kl_div (log targets, batchmean) and cross_entropy."""
    classes = student.shape[-1]
    s, t = student.reshape(-1, classes).double(), teacher.reshape(-1, classes).double()
    kl = F.kl_div(
        F.log_softmax(s / temperature, -1), F.log_softmax(t / temperature, -1), log_target=True, reduction="batchmean"
    )
    return alpha * temperature**2 * kl + (1 - alpha) * F.cross_entropy(s, labels.reshape(-1))


@pytest.mark.points(3)
@pytest.mark.parametrize(
    ("shape", "temperature", "alpha"),
    [((8, 10), 2.0, 0.5), ((2, 5, 7), 4.0, 0.9), ((4, 3), 1.0, 0.0), ((6, 12), 0.5, 1.0)],
)
def test_distillation_loss_matches_kl_div_and_cross_entropy(submission, shape, temperature, alpha):
    gen = generator("distill", shape)
    student, teacher = torch.randn(shape, generator=gen) * 3, torch.randn(shape, generator=gen) * 3
    labels = torch.randint(0, shape[-1], shape[:-1], generator=gen)
    got = submission.function("distillation_loss")(student, teacher, labels, temperature, alpha)
    expected = distillation_reference(student, teacher, labels, temperature, alpha)
    assert isinstance(got, torch.Tensor) and got.dim() == 0, "distillation_loss must return a scalar tensor"
    assert float(got) == pytest.approx(float(expected), rel=1e-5, abs=1e-6), (
        f"T={temperature}, alpha={alpha}: got {float(got):.6f}, expected {float(expected):.6f} "
        "(alpha * T^2 * KL(teacher || student) + (1 - alpha) * cross entropy)"
    )


@pytest.mark.points(1)
def test_distillation_loss_rejects_bad_temperature_and_alpha(submission):
    s, labels = torch.randn(2, 3), torch.tensor([0, 1])
    expect_exception("ValueError", lambda: submission.function("distillation_loss")(s, s, labels, 0.0, 0.5))
    expect_exception("ValueError", lambda: submission.function("distillation_loss")(s, s, labels, 2.0, 1.5))
