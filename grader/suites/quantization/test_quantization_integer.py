"""Hidden suite: quantize / dequantize and int4 packing, as properties over random shapes,
dtypes and value ranges (Hypothesis), plus the exact cases: all 16 int4 values, odd lengths,
an all-zero tensor, and a ValueError for every bad input the docstrings name.

Every expected value is computed here from the docstring's formulas (grader/suites/quantization/
reference.py), never by the submission; Hypothesis runs in the grader and calls the worker once
per example.
"""

from __future__ import annotations

import os
import tempfile

import pytest
import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from grader.sandbox.script import Saved, Step
from grader.suites.quantization import reference
from grader.testing import assert_matches, expect_exception

# Even without a database, Hypothesis caches the constants it finds in local source files in its
# storage directory (./.hypothesis by default): point it at a temporary folder, removed at exit.
_STORAGE = tempfile.TemporaryDirectory(prefix="hypothesis-")
os.environ.setdefault("HYPOTHESIS_STORAGE_DIRECTORY", _STORAGE.name)

# No "explain" phase: it re-runs a failing example ~150 times to annotate the falsifying
# example, which the student never sees (a failure shows the assertion's message only). Slow
# input generation is the grading machine's state, never a verdict on the submission.
PROPERTY = settings(
    max_examples=40,
    deadline=None,
    database=None,
    phases=(Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink),
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
DTYPES = (torch.float32, torch.bfloat16, torch.float16)


@st.composite
def tensors(draw, last_multiple_of: int = 1):
    """A tensor of 1-3 dimensions, sizes 1-12 (the last a multiple of `last_multiple_of`), in
    a random dtype, from one of four distributions, scaled by 10^-3 .. 10^3 (finite)."""
    dims = draw(st.integers(1, 3))
    shape = [draw(st.integers(1, 12)) for _ in range(dims)]
    shape[-1] = last_multiple_of * draw(st.integers(1, 4)) if last_multiple_of > 1 else shape[-1]
    dtype = draw(st.sampled_from(DTYPES))
    kind = draw(st.sampled_from(["normal", "positive", "heavy-tailed", "sparse"]))
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**31)))
    x = torch.randn(shape, generator=gen)
    if kind == "positive":
        x = x.abs() + 0.5
    elif kind == "heavy-tailed":
        x = x / torch.rand(shape, generator=gen).clamp(min=0.05)
    elif kind == "sparse":
        x = x * (torch.rand(shape, generator=gen) < 0.3)
    x = x * 10.0 ** draw(st.integers(-3, 3))
    return x.clamp(-6e4, 6e4).to(dtype)  # finite in float16 too (largest 65504)


def quantize_and_back(submission, x: torch.Tensor, **options) -> tuple[dict, torch.Tensor]:
    """The QuantizedTensor's fields (QuantizedTensor.to_dict) and dequantize's result."""
    steps = [
        Step("quantize", (x,), options, save_as="qt", send_back=False),
        Step("qt.to_dict"),
        Step("dequantize", (Saved("qt"),)),
    ]
    _, fields, x_hat = submission.script(steps).steps[0]
    return fields, x_hat


def check_half_step(x: torch.Tensor, fields: dict, x_hat: torch.Tensor, options: dict) -> None:
    """Scales as the docstring defines them, and every element within half a step."""
    bits, symmetric = options["bits"], options.get("symmetric", True)
    granularity, axis = options.get("granularity", "tensor"), options.get("axis", 0)
    group_size = options.get("group_size", 128)
    scale, zero = reference.expected_scales(x, bits, symmetric, granularity, axis, group_size)
    assert_matches(fields["scale"].reshape(-1).float(), scale, f"scales ({options})", rtol=1e-5)
    if not symmetric:
        assert fields["zero_point"] is not None, f"asymmetric quantization must return zero points ({options})"
        assert_matches(fields["zero_point"].reshape(-1).double(), zero.double(), f"zero points ({options})", atol=1)
    assert x_hat.dtype == torch.float32, f"dequantize must return float32, got {x_hat.dtype}"
    assert tuple(x_hat.shape) == tuple(x.shape), (
        f"dequantize returned shape {tuple(x_hat.shape)}, expected {tuple(x.shape)}"
    )
    half = scale.double()[:, None] / 2
    error = reference.rows((x_hat.double() - x.double()).abs(), granularity, axis, group_size)
    allowed = half * (1 + 1e-4) + 1e-6 * reference.rows(x.double().abs(), granularity, axis, group_size)
    worst = int(torch.argmax(error - allowed))
    assert bool((error <= allowed).all()), (
        f"{options}, shape {tuple(x.shape)}, {x.dtype}: an element is off by {error.flatten()[worst].item():.4g}, "
        f"more than half a quantization step ({(allowed.flatten()[worst].item()):.4g})"
    )
    assert_matches(
        x_hat.double(), reference.dequantize(fields), "dequantize vs (q - z) * s of the returned fields", 1e-6, 1e-12
    )


@pytest.mark.points(3)
@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("symmetric", [True, False], ids=["symmetric", "asymmetric"])
@pytest.mark.parametrize("granularity", ["tensor", "channel"])
def test_every_element_is_within_half_a_step(submission, bits, symmetric, granularity):
    @PROPERTY
    @given(x=tensors(), data=st.data())
    def check(x, data):
        axis = data.draw(st.integers(0, x.dim() - 1)) if granularity == "channel" else 0
        options = dict(bits=bits, symmetric=symmetric, granularity=granularity, axis=axis)
        fields, x_hat = quantize_and_back(submission, x, **options)
        check_half_step(x, fields, x_hat, options)

    check()


@pytest.mark.points(3)
@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("symmetric", [True, False], ids=["symmetric", "asymmetric"])
def test_groups_along_the_last_dimension_are_within_half_a_step(submission, bits, symmetric):
    @PROPERTY
    @given(x=tensors(last_multiple_of=8), group_size=st.sampled_from([4, 8]))
    def check(x, group_size):
        options = dict(bits=bits, symmetric=symmetric, granularity="group", group_size=group_size)
        fields, x_hat = quantize_and_back(submission, x, **options)
        expected = (*x.shape[:-1], x.shape[-1] // group_size)
        assert tuple(fields["scale"].shape) == expected, (
            f"group scales have shape {tuple(fields['scale'].shape)}, expected {expected}"
        )
        check_half_step(x, fields, x_hat, options)

    check()


@pytest.mark.points(2)
@pytest.mark.parametrize("bits", [8, 4])
def test_zero_is_exact_in_asymmetric_mode(submission, bits):
    @PROPERTY
    @given(x=tensors(last_multiple_of=4), granularity=st.sampled_from(["tensor", "channel", "group"]))
    def check(x, granularity):
        x = x.clone()
        x.view(-1)[:: max(1, x.numel() // 3)] = 0.0
        options = dict(bits=bits, symmetric=False, granularity=granularity, group_size=4)
        _, x_hat = quantize_and_back(submission, x, **options)
        zeros = x == 0
        assert bool((x_hat[zeros] == 0).all()), (
            f"{options}: 0.0 came back as {x_hat[zeros][x_hat[zeros] != 0][:3].tolist()}"
        )

    check()


@pytest.mark.points(4)
def test_quantizing_the_dequantized_tensor_gives_the_same_integers(submission):
    """quantize(dequantize(quantize(x))) == quantize(x) for symmetric quantization: the largest
    magnitude always lands on +-qmax, so the scale comes back the same. (Asymmetric is left out:
    when lo / s is a half-integer, the maximum can round to qmax - 1 and the scale shrinks.)"""
    symmetric = True

    @PROPERTY
    @given(
        x=tensors(last_multiple_of=4), bits=st.sampled_from([8, 4]), granularity=st.sampled_from(["tensor", "group"])
    )
    def check(x, bits, granularity):
        options = dict(bits=bits, symmetric=symmetric, granularity=granularity, group_size=4)
        steps = [
            Step("quantize", (x,), options, save_as="qt", send_back=False),
            Step("qt.to_dict"),
            Step("dequantize", (Saved("qt"),), save_as="x_hat", send_back=False),
            Step("quantize", (Saved("x_hat"),), options, save_as="again", send_back=False),
            Step("again.to_dict"),
        ]
        results = submission.script(steps).steps[0]
        first, second = results[1], results[4]
        assert_matches(reference.integers(second), reference.integers(first), f"{options}: integers after a round trip")
        assert_matches(second["scale"], first["scale"], f"{options}: scales after a round trip", rtol=1e-5)

    check()


@pytest.mark.points(2)
def test_pack_int4_round_trips_all_16_values_and_odd_lengths(submission):
    values = torch.arange(-8, 8, dtype=torch.int8)
    for q in (values, values[:-1], values.flip(0).reshape(4, 4), torch.tensor([-8], dtype=torch.int8)):
        steps = [Step("pack_int4", (q,), save_as="packed"), Step("unpack_int4", (Saved("packed"), q.numel()))]
        packed, unpacked = submission.script(steps).steps[0]
        assert packed.dtype == torch.uint8, f"pack_int4 must return uint8, got {packed.dtype}"
        expected = reference.unpack(packed, q.numel())
        assert_matches(expected, q.reshape(-1).long(), f"the nibbles of pack_int4({q.tolist()}), low nibble first")
        assert_matches(unpacked, q.reshape(-1), f"unpack_int4(pack_int4(q), {q.numel()})")


@pytest.mark.points(2)
def test_pack_int4_round_trips_random_values(submission):
    @PROPERTY
    @given(n=st.integers(1, 257), seed=st.integers(0, 2**31))
    def check(n, seed):
        q = torch.randint(-8, 8, (n,), generator=torch.Generator().manual_seed(seed), dtype=torch.int8)
        steps = [Step("pack_int4", (q,), save_as="packed"), Step("unpack_int4", (Saved("packed"), n))]
        _, unpacked = submission.script(steps).steps[0]
        assert_matches(unpacked, q, f"unpack_int4(pack_int4(q), {n})")

    check()


@pytest.mark.points(1)
def test_unpack_int4_refuses_more_values_than_the_bytes_hold(submission):
    """3 bytes hold 6 values: 6 are returned, 7 (one past) and 9 raise ValueError."""
    packed = submission.function("pack_int4")(torch.arange(-3, 3, dtype=torch.int8))
    assert_matches(submission.function("unpack_int4")(packed, 6), torch.arange(-3, 3, dtype=torch.int8), "6 of 6")
    for numel in (7, 9):
        expect_exception("ValueError", lambda numel=numel: submission.function("unpack_int4")(packed, numel))


@pytest.mark.points(1)
@pytest.mark.parametrize("symmetric", [True, False], ids=["symmetric", "asymmetric"])
def test_an_all_zero_tensor_quantizes_without_nan(submission, symmetric):
    for granularity in ("tensor", "channel", "group"):
        x = torch.zeros(4, 8)
        options = dict(bits=4, symmetric=symmetric, granularity=granularity, group_size=4)
        fields, x_hat = quantize_and_back(submission, x, **options)
        assert torch.isfinite(fields["scale"]).all(), f"{options}: scales of an all-zero tensor: {fields['scale']}"
        assert_matches(x_hat, x, f"{options}: an all-zero tensor after the round trip")


BAD_INPUTS = [
    ("nan", torch.tensor([1.0, float("nan")]), {}),
    ("inf", torch.tensor([1.0, float("inf")]), {}),
    ("minus-inf", torch.tensor([[1.0, -float("inf")]]), {"granularity": "channel"}),
    ("bits-3", torch.ones(4), {"bits": 3}),
    ("bits-16", torch.ones(4), {"bits": 16}),
    ("group-does-not-divide", torch.ones(2, 10), {"granularity": "group", "group_size": 4}),
    ("group-larger-than-row", torch.ones(2, 8), {"granularity": "group", "group_size": 16}),
    ("group-size-0", torch.ones(2, 8), {"granularity": "group", "group_size": 0}),
    ("unknown-granularity", torch.ones(4), {"granularity": "row"}),
    ("axis-out-of-range", torch.ones(2, 3), {"granularity": "channel", "axis": 2}),
]


@pytest.mark.points(1)
@pytest.mark.parametrize(("x", "options"), [p[1:] for p in BAD_INPUTS], ids=[p[0] for p in BAD_INPUTS])
def test_quantize_rejects_bad_input_with_value_error(submission, x, options):
    expect_exception("ValueError", lambda: submission.function("quantize")(x, **options))


@pytest.mark.points(1)
def test_pack_int4_rejects_values_outside_minus_8_to_7(submission):
    expect_exception("ValueError", lambda: submission.function("pack_int4")(torch.tensor([0, 8], dtype=torch.int8)))
