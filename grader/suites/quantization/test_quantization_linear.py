"""Hidden suite: QuantLinear against dequantize-then-matmul (computed here from the layer's own
quantized weight), the W4A16 Triton kernel under the interpreter at small shapes, and, on a
GPU, the kernel timed against a bf16 matmul (torch) of the same shape in a trusted worker."""

from __future__ import annotations

import pytest
import torch

from grader.sandbox.script import Step
from grader.suites.quantization import reference
from grader.testing import assert_matches, expect_exception, generator


def layer_steps(weight, bias, x, **options) -> list[Step]:
    return [
        Step("QuantLinear", (weight, bias), options, save_as="layer", send_back=False),
        Step("layer.weight_fields"),
        Step("layer.forward", (x,)),
    ]


@pytest.mark.points(3)
@pytest.mark.parametrize(
    ("bits", "group_size", "bias", "dtype"),
    [
        (8, 128, True, torch.float32),
        (8, 128, False, torch.float64),
        (4, 32, True, torch.float32),
        (4, 16, False, torch.float32),
    ],
    ids=["int8-bias", "int8-float64", "int4-g32-bias", "int4-g16"],
)
def test_quant_linear_equals_dequantize_then_matmul(submission, bits, group_size, bias, dtype):
    gen = generator("qlinear", bits, group_size)
    weight = torch.randn(24, 64, generator=gen) * 0.1
    b = torch.randn(24, generator=gen) if bias else None
    x = torch.randn(3, 5, 64, generator=gen).to(dtype)
    _, fields, out = submission.script(layer_steps(weight, b, x, bits=bits, group_size=group_size)).steps[0]
    granularity = "channel" if bits == 8 else "group"
    assert fields["bits"] == bits and fields["granularity"] == granularity, (
        f"bits={bits}: the weight must be quantized with granularity {granularity!r}, got {fields['granularity']!r}"
    )
    w_hat = reference.dequantize(fields)
    scale, _ = reference.expected_scales(weight, bits, True, granularity, 0, group_size)
    assert_matches(fields["scale"].reshape(-1).float(), scale, "the weight's scales (symmetric)", rtol=1e-5)
    expected = x.double() @ w_hat.T + (b.double() if bias else 0)
    assert out.dtype == dtype, f"forward must return x's dtype {dtype}, got {out.dtype}"
    assert_matches(out.double(), expected, "forward vs x @ dequantize(W).T + b", 1e-4, 1e-4)


@pytest.mark.points(1)
def test_quant_linear_rejects_unsupported_bits_and_groups(submission):
    weight = torch.randn(4, 48)
    expect_exception(
        "ValueError", lambda: submission.script([Step("QuantLinear", (weight, None), {"bits": 2}, send_back=False)])
    )
    expect_exception(
        "ValueError",
        lambda: submission.script(
            [Step("QuantLinear", (weight, None), {"bits": 4, "group_size": 32}, send_back=False)]
        ),
    )


def int4_weight(
    n: int, k: int, group_size: int, gen: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(packed bytes, scales, dequantized weight) of a random symmetric int4 weight, made here."""
    q = torch.randint(-7, 8, (n, k), generator=gen)
    scale = torch.rand(n, k // group_size, generator=gen) * 0.1 + 0.01
    nibbles = (q & 0xF).reshape(-1, 2)
    packed = (nibbles[:, 0] | (nibbles[:, 1] << 4)).to(torch.uint8)
    return packed, scale, q.float() * scale.repeat_interleave(group_size, dim=1)


@pytest.mark.points(4)
@pytest.mark.parametrize(
    ("m", "n", "k", "group_size", "dtype"),
    [
        (5, 48, 64, 32, torch.float32),
        (1, 64, 128, 64, torch.float32),
        (17, 40, 96, 16, torch.float16),
        # K of several of the kernel's K blocks: a loop over K that runs once passes the others
        (3, 32, 512, 128, torch.float32),
        (2, 16, 1024, 64, torch.float32),
    ],
    ids=["5x48x64-g32", "1x64x128-g64", "17x40x96-g16-fp16", "3x32x512-g128", "2x16x1024-g64"],
)
def test_w4a16_kernel_matches_dequantized_matmul(submission, m, n, k, group_size, dtype):
    """Under the Triton interpreter on CPU: correctness at small, unaligned shapes."""
    gen = generator("w4a16", m, n, k)
    packed, scale, w = int4_weight(n, k, group_size, gen)
    x = torch.randn(m, k, generator=gen).to(dtype)
    out = submission.function("w4a16_matmul")(x, packed, scale, group_size)
    expected = x.double() @ w.double().T
    tol = 1e-4 if dtype == torch.float32 else 2e-2
    assert out.dtype == dtype, f"w4a16_matmul must return x's dtype {dtype}, got {out.dtype}"
    assert_matches(out.double(), expected, f"w4a16_matmul {m}x{n}x{k} vs x @ (q * s).T", tol, tol)


@pytest.mark.points(1)
def test_w4a16_kernel_reads_only_the_k_columns_of_a_strided_x(submission):
    """x is a view of the first K = 64 columns of a wider tensor whose other columns are NaN: a
    kernel that loads one column past K (a mask off by one) reads a NaN, and NaN * 0 is NaN.
    Under the Triton interpreter on CPU; expected: float64 x @ (q * s).T."""
    gen = generator("w4a16-strided")
    packed, scale, w = int4_weight(24, 64, 32, gen)
    wide = torch.full((3, 80), float("nan"))
    wide[:, :64] = torch.randn(3, 64, generator=gen)
    x = wide[:, :64]
    out = submission.function("w4a16_matmul")(x, packed, scale, 32)
    expected = x.double() @ w.double().T
    assert_matches(
        out.double(), expected, "w4a16_matmul on x = wide[:, :64] (NaN in columns 64..79): use x's strides and mask "
        "the K dimension with k < K", 1e-4, 1e-4,
    )  # fmt: skip


W4A16_BAD_SHAPES = [
    ((2, 48), 24 * 48 // 2, (24, 1), 32, "K=48 is not a multiple of group_size 32"),
    ((2, 48), 24 * 48 // 2, (24, 4), 12, "group_size 12 is not a multiple of 16"),
    ((2, 64), 24 * 64 // 2 - 1, (24, 2), 32, "packed holds N * K / 2 - 1 bytes"),
]


@pytest.mark.points(1)
@pytest.mark.parametrize(
    ("x_shape", "nbytes", "scale_shape", "group_size", "why"),
    W4A16_BAD_SHAPES,
    ids=["k-not-a-multiple-of-group", "group-not-a-multiple-of-16", "packed-one-byte-short"],
)
def test_w4a16_matmul_rejects_each_documented_bad_shape(submission, x_shape, nbytes, scale_shape, group_size, why):
    """Docstring: "Raises ValueError when K is not a multiple of group_size, group_size is not a
    multiple of 16, or packed does not hold N * K / 2 bytes" (each condition alone)."""
    x, packed = torch.randn(*x_shape), torch.zeros(nbytes, dtype=torch.uint8)
    try:
        expect_exception(
            "ValueError", lambda: submission.function("w4a16_matmul")(x, packed, torch.ones(scale_shape), group_size)
        )
    except AssertionError as error:
        raise AssertionError(f"w4a16_matmul when {why}: {error}") from None


@pytest.mark.points(1)
def test_quant_linear_int4_forward_computes_in_float64_for_float64_input(submission):
    """Docstring: "computed in x's dtype". bits=4 on a float64 x equals x @ dequantize(W).T + b
    to float64 precision (1e-12), where a float32 computation is about 1e-7 off. Expected:
    dequantize's float32 weight, then a float64 matmul (torch)."""
    gen = generator("qlinear-int4-float64")
    weight, b = torch.randn(24, 64, generator=gen) * 0.1, torch.randn(24, generator=gen)
    x = torch.randn(3, 64, generator=gen, dtype=torch.float64)
    _, fields, out = submission.script(layer_steps(weight, b, x, bits=4, group_size=32)).steps[0]
    w_hat = reference.dequantize(fields).float().double()  # dequantize's float32 weight (exact: q * s rounds once)
    expected = x @ w_hat.T + b.double()
    assert out.dtype == torch.float64, f"forward must return x's dtype float64, got {out.dtype}"
    assert_matches(out, expected, "bits=4, float64 x: forward vs x @ dequantize(W).T + b in float64", 1e-12, 1e-12)


W4A16_SHAPE = (16, 8192, 8192)  # decode-like: 16 rows of activations, an 8192 x 8192 weight
W4A16_REPEATS = 48
# Distinct weights the timed calls cycle through: 4 x 34 MB (packed bytes and scales) is more than
# an H100's or H200's 50 MB of L2, so each call reads its weight from memory, as the bf16 matmul
# it is compared with (128 MB) must.
W4A16_COPIES = 4
# Points scale with the ratio to a bf16 matmul measured in the same job, in tiers set from the
# reference kernel's own ratio: within 2.5x of it the partial points, within 1.25x the rest.
# W4A16_REFERENCE_RATIO is the reference's time over the bf16 matmul's at W4A16_SHAPE (the
# benchmark of `make gpu-check`). The split-K kernel of issue 50 was written without a GPU, so it
# is still the goal (<= 1.5x), not a measurement: the earlier kernel measured 5.6-9.8x on
# an H200 (torch 2.11, Triton 3.6), and this check stayed out of the grade. `make gpu-check`
# prints the measured ratio, and its gpu-tests fail while the reference misses a tier here
# (tests/test_quantization_checks.py): set W4A16_REFERENCE_RATIO from that table.
W4A16_REFERENCE_RATIO = 1.5
W4A16_PARTIAL = 2.5 * W4A16_REFERENCE_RATIO
W4A16_FULL = 1.25 * W4A16_REFERENCE_RATIO
W4A16_TIERS = [
    pytest.param(W4A16_PARTIAL, marks=pytest.mark.points(2), id=f"within_{W4A16_PARTIAL:g}x"),
    pytest.param(W4A16_FULL, marks=pytest.mark.points(2), id=f"within_{W4A16_FULL:g}x"),
]
_w4a16_measured: list[tuple[float, float]] = []


def _w4a16_seconds(submission, library) -> tuple[float, float]:
    """(kernel seconds, bf16 matmul seconds) per call at W4A16_SHAPE, measured once per run: the
    kernel as the best of 3 scripts of W4A16_REPEATS calls (cycling through W4A16_COPIES weights,
    synchronised by the last call's result), the matmul with CUDA events in a trusted worker."""
    if not _w4a16_measured:
        m, n, k = W4A16_SHAPE
        gen = generator("w4a16-time")
        packed, scale, w = int4_weight(n, k, 128, gen)  # w (float32): the bf16 matmul's weight
        weights = [(packed, scale)] + [int4_weight(n, k, 128, gen)[:2] for _ in range(W4A16_COPIES - 1)]
        x = torch.randn(m, k, generator=gen).bfloat16()
        steps = [
            Step("w4a16_matmul", (x, *weights[i % W4A16_COPIES], 128), send_back=False)
            for i in range(W4A16_REPEATS - 1)
        ]
        steps.append(Step("w4a16_matmul", (x, *weights[0], 128)))
        submission.script(steps[: W4A16_COPIES + 1])  # warm-up: compilation and autotuning
        kernel_s = min(submission.script(steps).seconds for _ in range(3)) / W4A16_REPEATS
        target = "grader.suites.quantization.reference:bf16_matmul_seconds"
        matmul_s = min(library.spmd(target, 1, [(x, w, W4A16_REPEATS)]).outputs[0] for _ in range(3))
        _w4a16_measured.append((kernel_s, matmul_s))
    return _w4a16_measured[0]


@pytest.mark.gpu
@pytest.mark.perf
@pytest.mark.parametrize("limit", W4A16_TIERS)
def test_w4a16_kernel_time_against_bf16_matmul(submission, library, limit, record_property):
    """Memory-bound decode shape: reading 4-bit weights should not be slower than reading bf16
    ones. Seconds per call of the kernel (a script of repeated calls, synchronised at the end)
    over seconds per torch bf16 matmul (CUDA events, trusted worker), both in this run."""
    kernel_s, matmul_s = _w4a16_seconds(submission, library)
    ratio = kernel_s / matmul_s
    record_property("w4a16_us", round(kernel_s * 1e6, 2))
    record_property("bf16_matmul_us", round(matmul_s * 1e6, 2))
    record_property("time_ratio_vs_bf16", round(ratio, 3))
    assert ratio <= limit, (
        f"w4a16_matmul took {kernel_s * 1e6:.1f} us per call, {ratio:.2f}x a bf16 matmul ({matmul_s * 1e6:.1f} us); "
        f"this tier needs <= {limit:g}x. Dequantize inside the kernel: never write the full weight to memory; "
        f"with M = 16 rows, split K so that every SM streams weight bytes."
    )
