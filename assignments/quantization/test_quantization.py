"""Public tests for the quantization module: run them while you work with

    pytest assignments/quantization

Your functions run in a worker process, never inside pytest. `quantize` returns a
QuantizedTensor, which stays in the worker: the tests read it with `to_dict()` (Step ... "qt.to_dict")
and pass it on to `dequantize` (Saved("qt")). The hidden suite checks many more cases with
Hypothesis (shapes, dtypes, value ranges), FP8 bit for bit against torch, NF4 against the
published table, accuracy floors, counted storage and the Triton kernel; `make grade` gives the score.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from grader.sandbox.script import Saved, Step
from grader.testing import assert_matches, expect_exception, generator


def round_trip(submission, x, **options):
    """(QuantizedTensor.to_dict(), dequantize(qt)) in one call into the worker."""
    steps = [
        Step("quantize", (x,), options, save_as="qt", send_back=False),
        Step("qt.to_dict"),
        Step("dequantize", (Saved("qt"),)),
    ]
    _, fields, x_hat = submission.script(steps).steps[0]
    return fields, x_hat


def test_symmetric_int8_per_tensor_is_within_half_a_step(submission):
    x = torch.randn(16, 32, generator=generator("public-int8"))
    fields, x_hat = round_trip(submission, x, bits=8)
    step = x.abs().max() / 127
    assert_matches(fields["scale"].float(), step, "scale = max|x| / 127", rtol=1e-6)
    assert (x_hat - x).abs().max() <= step / 2 * (1 + 1e-5), "an element is off by more than half a step"


def test_asymmetric_int4_keeps_zero_exact(submission):
    x = torch.tensor([[0.0, 0.3, 1.7, 2.0, 0.0, 0.9, 1.1, 0.5]])
    fields, x_hat = round_trip(submission, x, bits=4, symmetric=False)
    assert fields["zero_point"] is not None, "asymmetric quantization returns a zero point"
    assert torch.equal(x_hat[x == 0], torch.zeros(2)), f"0.0 came back as {x_hat[x == 0].tolist()}"


def test_group_scales_have_one_scale_per_group(submission):
    x = torch.randn(4, 64, generator=generator("public-group"))
    fields, _ = round_trip(submission, x, bits=4, granularity="group", group_size=16)
    assert tuple(fields["scale"].shape) == (4, 4), f"scale shape {tuple(fields['scale'].shape)}, expected (4, 4)"
    assert fields["data"].numel() == 128, f"256 int4 values must pack into 128 bytes, got {fields['data'].numel()}"


def test_pack_int4_round_trips_all_16_values_with_an_odd_length(submission):
    q = torch.arange(-8, 7, dtype=torch.int8)  # 15 values
    steps = [Step("pack_int4", (q,), save_as="packed"), Step("unpack_int4", (Saved("packed"), 15))]
    packed, unpacked = submission.script(steps).steps[0]
    assert packed.dtype == torch.uint8 and packed.numel() == 8, f"got {packed.numel()} {packed.dtype}"
    assert packed[0].item() == (0x8 | 0x9 << 4), "byte 0 holds -8 (0b1000) low and -7 (0b1001) high"
    assert_matches(unpacked, q, "unpack_int4(pack_int4(q))")


def test_quantize_rejects_nan(submission):
    expect_exception("ValueError", lambda: submission.function("quantize")(torch.tensor([1.0, float("nan")])))


@pytest.mark.parametrize(
    ("fmt", "dtype"), [("e4m3", torch.float8_e4m3fn), ("e5m2", torch.float8_e5m2)], ids=["e4m3", "e5m2"]
)
def test_fp8_matches_torch_cast(submission, fmt, dtype):
    x = torch.randn(100, generator=generator("public-fp8"))
    data, scale = submission.function("quantize_fp8")(x, fmt)
    assert_matches(scale.float(), x.abs().max() / torch.finfo(dtype).max, "scale", rtol=1e-6)
    assert_matches(data.view(torch.uint8), (x / scale).to(dtype).view(torch.uint8), "bits of (x / scale).to(fp8)")


def test_nf4_codes_of_the_extremes(submission):
    x = torch.tensor([-2.0, 0.0, 2.0, 1.0])  # one block: absmax 2
    codes, absmax = submission.function("quantize_nf4")(x, 64)
    assert_matches(absmax.float(), torch.tensor([2.0]), "absmax of the block")
    assert codes.tolist() == [0 | 7 << 4, 15 | 12 << 4], f"codes {codes.tolist()}: indices 0, 7, 15, 12 two per byte"


def test_nf4_dequantize_reads_low_nibble_first_and_scales_by_its_block(submission):
    # indices 0, 15 | 7, 15 | 15 (blocks of 2; the last byte's high nibble is padding)
    codes = torch.tensor([0 | 15 << 4, 7 | 15 << 4, 15], dtype=torch.uint8)
    absmax = torch.tensor([2.0, 4.0, 1.0])
    x_hat = submission.function("dequantize_nf4")(codes, absmax, (5,), 2)
    expected = torch.tensor([-2.0, 2.0, 0.0, 4.0, 1.0])  # NF4_CODE[0] = -1, [7] = 0, [15] = 1
    assert_matches(x_hat, expected, "dequantize_nf4: NF4_CODE[index] * absmax of the element's block")


def test_quant_linear_int4_matches_dequantize_then_matmul(submission):
    gen = generator("public-linear")
    weight, bias, x = (
        torch.randn(8, 64, generator=gen),
        torch.randn(8, generator=gen),
        torch.randn(3, 64, generator=gen),
    )
    steps = [
        Step("QuantLinear", (weight, bias), {"bits": 4, "group_size": 32}, save_as="layer", send_back=False),
        Step("quantize", (weight,), dict(bits=4, granularity="group", group_size=32), save_as="qt", send_back=False),
        Step("dequantize", (Saved("qt"),)),
        Step("layer.forward", (x,)),
    ]
    results = submission.script(steps).steps[0]
    assert_matches(results[3], x @ results[2].T + bias, "forward vs x @ dequantize(W).T + b", 1e-5, 1e-5)


def test_w4a16_kernel_small(submission):
    q = torch.randint(-8, 8, (16, 32), generator=generator("public-w4a16"))
    nibbles = (q & 0xF).reshape(-1, 2)
    packed = (nibbles[:, 0] | nibbles[:, 1] << 4).to(torch.uint8)
    scale = torch.full((16, 1), 0.5)
    x = torch.randn(2, 32, generator=generator("public-w4a16-x"))
    out = submission.function("w4a16_matmul")(x, packed, scale, 32)
    assert_matches(out, x @ (q.float() * 0.5).T, "w4a16_matmul vs x @ (q * s).T", 1e-5, 1e-5)


def test_sqnr_db_and_distillation_loss(submission):
    x = torch.ones(4)
    assert submission.function("sqnr_db")(x, x * 0.9) == pytest.approx(20.0), "10 log10(4 / 0.04) = 20 dB"
    gen = generator("public-distill")
    s, t, labels = torch.randn(4, 5, generator=gen), torch.randn(4, 5, generator=gen), torch.tensor([0, 1, 2, 3])
    got = submission.function("distillation_loss")(s, t, labels, 2.0, 0.5)
    kl = F.kl_div(F.log_softmax(s / 2, -1), F.log_softmax(t / 2, -1), log_target=True, reduction="batchmean")
    expected = 0.5 * 4 * kl + 0.5 * F.cross_entropy(s, labels)
    assert math.isclose(float(got), float(expected), rel_tol=1e-5), f"got {float(got)}, expected {float(expected)}"
