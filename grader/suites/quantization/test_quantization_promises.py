"""Hidden suite: the promises of the quantization docstrings that the other files leave
untested (tests/spec/promises.toml maps every promise to its tests). Expected values come from
the docstrings' formulas computed here (grader/suites/quantization/reference.py, torch.round,
torch's float8 casts), or, for distillation_loss's gradients, autograd through
torch.nn.functional.kl_div and cross_entropy in float64.

- ValueError for every documented bad input the other files leave out (empty tensors, an
  infinite value for NF4, -9 for pack_int4, axis -3, a negative temperature or alpha), one per
  test;
- the shape of quantize's scale per granularity; torch.round's halves to even; an all-zero
  group's s = 1 and z = qmin;
- pack_int4 for any integer dtype and shape, and the zero high nibble of an odd count (NF4's too);
- an all-zero NF4 block: absmax 0 (float32) and every index 7;
- FP8's scale: a float32 tensor of shape (), exactly 1.0 for an all-zero tensor;
- sqnr_db returns a Python float; distillation_loss's gradient reaches the student, not the
  teacher;
- w4a16_matmul never materialises W in full precision (the largest tensor any aten operator
  produces in the worker, probe "largest"); on a GPU, QuantLinear(bits=4).forward likewise.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from grader.sandbox import SubmissionError
from grader.sandbox.script import Saved, Step
from grader.suites.quantization import reference
from grader.testing import assert_matches, expect_exception, generator


def _expect(error_type: str, call, what: str) -> None:
    """expect_exception with the arguments of the call in the message."""
    try:
        expect_exception(error_type, call)
    except AssertionError as error:
        raise AssertionError(f"{what}: {error}") from None


def _fields(submission, x: torch.Tensor, **options) -> dict:
    steps = [Step("quantize", (x,), options, save_as="qt", send_back=False), Step("qt.to_dict")]
    return submission.script(steps).steps[0][1]


@pytest.mark.points(1)
def test_quantize_rejects_an_empty_tensor(submission):
    steps = [Step("quantize", (torch.zeros(0, 4),), send_back=False)]
    _expect("ValueError", lambda: submission.script(steps), "quantize(an empty (0, 4) tensor)")


@pytest.mark.points(1)
def test_quantize_rejects_a_negative_axis_out_of_range(submission):
    """ "`axis` out of range (channel)": -3 for a 2-D tensor (axis 2 is in test_quantization_integer)."""
    steps = [Step("quantize", (torch.ones(2, 3),), {"granularity": "channel", "axis": -3}, send_back=False)]
    _expect(
        "ValueError", lambda: submission.script(steps), "quantize(x of shape (2, 3), granularity='channel', axis=-3)"
    )


SCALE_SHAPES = [
    ("tensor", (3, 5), {}, ()),
    ("channel-axis-1", (2, 3, 4), {"granularity": "channel", "axis": 1}, (3,)),
    ("channel-axis-minus-1", (2, 3, 4), {"granularity": "channel", "axis": -1}, (4,)),
]


@pytest.mark.points(1)
@pytest.mark.parametrize(
    ("shape", "options", "expected"), [c[1:] for c in SCALE_SHAPES], ids=[c[0] for c in SCALE_SHAPES]
)
def test_quantize_scale_has_the_documented_shape(submission, shape, options, expected):
    """ "tensor": shape (); "channel": (x.shape[axis],) (group shapes are in test_quantization_integer)."""
    x = torch.randn(shape, generator=generator("scale-shape", shape))
    fields = _fields(submission, x, bits=8, **options)
    got = tuple(fields["scale"].shape)
    assert got == expected, (
        f"quantize(x of shape {shape}, {options or 'granularity tensor'}): scale of shape {got}, expected {expected}"
    )


@pytest.mark.points(1)
def test_quantize_rounds_halves_to_even(submission):
    """Symmetric int8 per tensor with max|x| = 127: s = 1, so x / s lands on halves exactly;
    torch.round sends 0.5 -> 0, 1.5 -> 2, 2.5 -> 2, -0.5 -> 0, -2.5 -> -2 (floor(x + 0.5) does not)."""
    x = torch.tensor([127.0, 0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.5])
    fields = _fields(submission, x, bits=8)
    assert_matches(fields["scale"].float().reshape(()), torch.tensor(1.0), "scale = max|x| / 127 = 1")
    assert_matches(
        reference.integers(fields),
        torch.round(x).long(),
        f"the integers of {x.tolist()} at s = 1 (torch.round: halves to even)",
    )


@pytest.mark.points(1)
@pytest.mark.parametrize("symmetric", [True, False], ids=["symmetric", "asymmetric"])
def test_quantize_gives_an_all_zero_group_scale_one(submission, symmetric):
    """int4 groups of 4 with group 0 of row 0 all zeros: its s is 1 (asymmetric: z = qmin = -8)
    while the others follow the formula (reference.expected_scales)."""
    x = torch.randn(2, 8, generator=generator("zero-group", symmetric))
    x[0, :4] = 0.0
    options = dict(bits=4, symmetric=symmetric, granularity="group", group_size=4)
    fields = _fields(submission, x, **options)
    scale, zero = reference.expected_scales(x, 4, symmetric, "group", 0, 4)
    what = f"{options}, the first group all zeros"
    assert_matches(fields["scale"].reshape(-1).float(), scale, f"{what}: scales (1 for the zero group)", rtol=1e-5)
    assert float(fields["scale"].reshape(-1)[0]) == 1.0, (
        f"{what}: the zero group's scale is {float(fields['scale'].reshape(-1)[0])}, expected 1"
    )
    if not symmetric:
        got = fields["zero_point"].reshape(-1).long()
        assert_matches(got, zero.long(), f"{what}: zero points (qmin = -8 for the zero group, by the formula)")


@pytest.mark.points(1)
def test_int4_packing_takes_any_integer_dtype_and_shape_and_zeroes_the_last_high_nibble(submission):
    """int64 (5 values, an odd count) and int32 (2 x 3): bytes computed here, element 2i in the
    low nibble, the last byte's high nibble 0 when the count is odd."""
    for q in (
        torch.tensor([-8, 7, -1, 3, -5], dtype=torch.int64),
        torch.tensor([[1, -2, 3], [-4, 5, -6]], dtype=torch.int32),
    ):
        nibbles = (q.reshape(-1) & 0xF).tolist() + [0] * (q.numel() % 2)
        expected = torch.tensor([lo | hi << 4 for lo, hi in zip(nibbles[::2], nibbles[1::2])], dtype=torch.uint8)
        packed = submission.function("pack_int4")(q)
        assert_matches(
            packed, expected, f"pack_int4({q.tolist()}, {q.dtype}): bytes, low nibble first, 0 in the last high nibble"
        )


@pytest.mark.points(1)
def test_pack_int4_rejects_values_below_minus_8(submission):
    """ "its values must lie in [-8, 7] (else ValueError)": the lower bound (8 is in test_quantization_integer)."""
    q = torch.tensor([0, -9], dtype=torch.int8)
    _expect("ValueError", lambda: submission.function("pack_int4")(q), "pack_int4([0, -9])")


NF4_BAD = [
    ("empty", torch.zeros(0)),
    ("inf", torch.tensor([1.0, float("inf")])),
    ("minus-inf", torch.tensor([-float("inf"), 2.0])),
]


@pytest.mark.points(1)
@pytest.mark.parametrize("x", [c[1] for c in NF4_BAD], ids=[c[0] for c in NF4_BAD])
def test_quantize_nf4_rejects_empty_and_infinite_input(submission, x):
    """NaN and block_size < 1 are in test_quantization_formats."""
    _expect("ValueError", lambda: submission.function("quantize_nf4")(x, 64), f"quantize_nf4({x.tolist()}, 64)")


@pytest.mark.points(1)
def test_nf4_all_zero_block_has_absmax_zero_and_index_7(submission):
    """71 bfloat16 elements in blocks of 64: block 0 all zeros -> absmax[0] = 0 (float32 whatever
    x's dtype) and 64 indices 7;
    an odd count -> the last byte's high nibble is 0."""
    x = torch.cat([torch.zeros(64), torch.randn(7, generator=generator("nf4-zero-block"))]).bfloat16()
    codes, absmax = submission.function("quantize_nf4")(x, 64)
    assert absmax.dtype == torch.float32, f"absmax must be float32, got {absmax.dtype}"
    assert float(absmax[0]) == 0.0, f"a block of zeros has absmax 0, got {float(absmax[0])}"
    index = reference.unpack(codes, 72, signed=False)
    assert bool((index[:64] == 7).all()), (
        f"a block of zeros gets index 7 (the code 0.0) everywhere, got indices {sorted(set(index[:64].tolist()))}"
    )
    assert int(index[71]) == 0, f"71 indices: the high nibble of the last byte must be 0, got {int(index[71])}"


@pytest.mark.points(1)
def test_quantize_fp8_rejects_an_empty_tensor(submission):
    _expect(
        "ValueError",
        lambda: submission.function("quantize_fp8")(torch.zeros(0), "e4m3"),
        "quantize_fp8(an empty tensor)",
    )


@pytest.mark.points(1)
@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
def test_fp8_scale_is_a_float32_scalar_and_one_for_zeros(submission, fmt):
    """A bfloat16 input still gets a float32 scale of shape (); an all-zero one gets exactly 1.0."""
    x = torch.randn(6, 5, generator=generator("fp8-scale", fmt)).bfloat16()
    _, scale = submission.function("quantize_fp8")(x, fmt)
    assert scale.dtype == torch.float32 and tuple(scale.shape) == (), (
        f"quantize_fp8(bfloat16 x, {fmt!r}): scale is {scale.dtype} of shape {tuple(scale.shape)}, "
        "expected a float32 tensor of shape ()"
    )
    data, scale = submission.function("quantize_fp8")(torch.zeros(4), fmt)
    assert float(scale) == 1.0, f"quantize_fp8(all zeros, {fmt!r}): scale {float(scale)}, expected 1.0"
    assert bool((data.float() == 0).all()), f"quantize_fp8(all zeros, {fmt!r}): data {data.float().tolist()}"


@pytest.mark.points(1)
def test_sqnr_db_returns_a_python_float(submission):
    x = torch.randn(50, generator=generator("sqnr-float"))
    got = submission.function("sqnr_db")(x, x + 0.01)
    assert isinstance(got, float), f"sqnr_db must return a Python float, got {type(got).__name__}"
    assert got == pytest.approx(reference.sqnr_db(x, x + 0.01), rel=1e-6), f"sqnr_db returned {got}"


def _distillation_reference(student, teacher, labels, temperature, alpha):
    classes = student.shape[-1]
    s, t = student.reshape(-1, classes), teacher.reshape(-1, classes)
    kl = F.kl_div(
        F.log_softmax(s / temperature, -1), F.log_softmax(t / temperature, -1), log_target=True, reduction="batchmean"
    )
    return alpha * temperature**2 * kl + (1 - alpha) * F.cross_entropy(s, labels.reshape(-1))


@pytest.mark.points(1)
def test_distillation_loss_gradient_reaches_the_student_not_the_teacher(submission):
    """Both logits require grad in the worker; after backward, the student's .grad equals autograd
    through F.kl_div and F.cross_entropy (float64, here) and the teacher's .grad is None."""
    gen = generator("distill-grad")
    student, teacher = torch.randn(3, 4, 5, generator=gen) * 2, torch.randn(3, 4, 5, generator=gen) * 2
    labels = torch.randint(0, 5, (3, 4), generator=gen)
    args = (labels, 3.0, 0.7)
    steps = [
        Step("distillation_loss", (student, teacher, *args), save_as="first", send_back=False),
        # Leaves that require grad, made in the worker (the grader's tensors arrive as copies).
        *(
            step
            for name, value in (("s", student), ("t", teacher))
            for step in (
                Step("first.new_zeros", (value.shape,), {"dtype": torch.float32}, save_as=f"{name}0", send_back=False),
                Step(f"{name}0.add_", (value,), save_as=f"{name}1", send_back=False),
                Step(f"{name}1.requires_grad_", save_as=name, send_back=False),
            )
        ),
        Step("distillation_loss", (Saved("s"), Saved("t"), *args), save_as="loss", send_back=False),
        Step("loss.backward", send_back=False),
        Step("s.__getattribute__", ("grad",)),
        Step("t.__getattribute__", ("grad",)),
    ]
    try:
        student_grad, teacher_grad = submission.script(steps).steps[0][-2:]
    except SubmissionError as error:
        if error.kind != "exception" or "backward" not in error.message:
            raise
        raise AssertionError(
            "distillation_loss: backward of the returned loss failed (does it depend on student_logits, "
            f"not a detached copy?): {error.message}"
        ) from None
    s = student.double().requires_grad_()
    _distillation_reference(s, teacher.double(), *args).backward()
    assert student_grad is not None, "distillation_loss: no gradient reached student_logits"
    assert_matches(
        student_grad.double(), s.grad, "distillation_loss (T=3, alpha=0.7): gradient of student_logits", 1e-5, 1e-6
    )
    assert teacher_grad is None, "distillation_loss: the teacher got a gradient; detach teacher_logits"


@pytest.mark.points(1)
@pytest.mark.parametrize(
    ("temperature", "alpha", "why"),
    [(-1.0, 0.5, "temperature -1 is <= 0"), (2.0, -0.5, "alpha -0.5 is outside [0, 1]")],
    ids=["negative-temperature", "negative-alpha"],
)
def test_distillation_loss_rejects_a_negative_temperature_or_alpha(submission, temperature, alpha, why):
    """The other side of each bound (temperature 0 and alpha 1.5 are in test_quantization_formats)."""
    s, labels = torch.randn(2, 3, generator=generator("distill-bad")), torch.tensor([0, 1])
    _expect(
        "ValueError",
        lambda: submission.function("distillation_loss")(s, s, labels, temperature, alpha),
        f"distillation_loss(temperature={temperature}, alpha={alpha}) ({why})",
    )


def _int4_weight(n: int, k: int, group_size: int, gen: torch.Generator):
    q = torch.randint(-7, 8, (n, k), generator=gen)
    scale = torch.rand(n, k // group_size, generator=gen) * 0.1 + 0.01
    nibbles = (q & 0xF).reshape(-1, 2)
    packed = (nibbles[:, 0] | (nibbles[:, 1] << 4)).to(torch.uint8)
    return packed, scale, q.float() * scale.repeat_interleave(group_size, dim=1)


@pytest.mark.points(2)
def test_w4a16_matmul_never_materialises_the_full_precision_weight(submission, record_property):
    """Under the Triton interpreter: x [2, 64], W [96, 64] in groups of 32. No aten operator in the
    worker may produce a tensor as large as W (6144 elements): the kernel dequantizes in
    registers. Dequantizing W with torch first (then any matmul) produces one."""
    gen = generator("w4a16-largest")
    packed, scale, w = _int4_weight(96, 64, 32, gen)
    x = torch.randn(2, 64, generator=gen)
    result = submission.function("w4a16_matmul").run((x, packed, scale, 32), measure=("largest",))
    figures = result.measurements[0][0]
    record_property("largest", figures["largest"])
    assert_matches(result.output, x @ w.T, "w4a16_matmul 2x96x64 vs x @ (q * s).T", 1e-4, 1e-4)
    assert figures["largest"] < w.numel(), (
        f"w4a16_matmul produced a tensor of {figures['largest']} elements ({figures['largest_op']}); W has "
        f"{w.numel()}: dequantize inside the kernel, never W in full precision in memory"
    )


@pytest.mark.gpu
@pytest.mark.points(2)
def test_quant_linear_int4_forward_runs_the_kernel_on_a_gpu(submission, record_property):
    """On a GPU, bits=4: forward runs w4a16_matmul, so no aten operator produces a tensor as
    large as W [256, 512] (the dequantized weight); the result matches x @ dequantize(W).T + b."""
    gen = generator("qlinear-gpu")
    weight, bias = torch.randn(256, 512, generator=gen) * 0.1, torch.randn(256, generator=gen)
    x = torch.randn(4, 512, generator=gen).half()
    steps = [
        Step("QuantLinear", (weight, bias), {"bits": 4, "group_size": 64}, save_as="layer", send_back=False),
        Step("layer.weight_fields"),
        Step("layer.forward", (x,), measure=("largest",)),
    ]
    result = submission.script(steps)
    fields, out = result.steps[0][1:]
    figures = result.measurements[0][2]
    record_property("largest", figures["largest"])
    expected = (
        x.double()
        @ reference.dequantize({k: v.cpu() if isinstance(v, torch.Tensor) else v for k, v in fields.items()}).T
        + bias.double()
    )
    assert_matches(
        out.cpu().double(), expected, "QuantLinear(bits=4).forward on the GPU vs x @ dequantize(W).T + b", 2e-2, 2e-2
    )
    assert figures["largest"] < math.prod(weight.shape), (
        f"QuantLinear(bits=4).forward on a GPU produced a tensor of {figures['largest']} elements "
        f"({figures['largest_op']}); W has {weight.numel()}: run w4a16_matmul instead of dequantizing W"
    )


@pytest.mark.points(1)
def test_quantize_takes_a_0_dim_tensor_per_tensor_and_refuses_it_per_group(submission):
    """A 0-dim tensor has one value: "tensor" granularity quantizes it (symmetric int8: s = |x| / 127,
    q = 127, scale of shape ()); "channel" and "group" have no dimension to work along (ValueError)."""
    fields = _fields(submission, torch.tensor(3.0))
    assert tuple(fields["scale"].shape) == () and float(fields["scale"]) == pytest.approx(3.0 / 127, rel=1e-6), (
        f"quantize(tensor(3.0)): scale {fields['scale']!r}, expected 3/127 of shape ()"
    )
    assert int(fields["data"]) == 127, f"quantize(tensor(3.0)): data {fields['data']!r}, expected 127"
    for options in ({"granularity": "channel"}, {"granularity": "group", "group_size": 1}):
        steps = [Step("quantize", (torch.tensor(3.0),), options, send_back=False)]
        _expect("ValueError", lambda steps=steps: submission.script(steps), f"quantize(tensor(3.0), **{options})")


@pytest.mark.points(1)
def test_pack_int4_rejects_floating_point_input(submission):
    """pack_int4 takes integers (else ValueError): float values in range are refused, not truncated."""
    q = torch.tensor([1.0, -2.0, 3.0, 0.0])
    _expect("ValueError", lambda: submission.function("pack_int4")(q), "pack_int4(a float32 tensor [1., -2., 3., 0.])")


@pytest.mark.points(1)
def test_quantize_nf4_accepts_blocks_of_one_element(submission):
    """block_size = 1 is valid (only < 1 raises): each element is its own block, so absmax = |x| and
    x / absmax is +-1 (index 15 or 0), or 0 / 0 for a zero, whose block gets index 7."""
    x = torch.tensor([0.5, -2.0, 3.0, 0.0, -1.0])
    codes, absmax = submission.function("quantize_nf4")(x, 1)
    indices = [15, 0, 15, 7, 0]
    expected = torch.tensor([indices[0] | indices[1] << 4, indices[2] | indices[3] << 4, indices[4]], dtype=torch.uint8)
    assert_matches(absmax, x.abs(), "quantize_nf4(x, block_size=1): absmax (one block per element)")
    assert_matches(codes, expected, "quantize_nf4(x, block_size=1): codes (indices 15, 0, 15, 7, 0)")
