"""Hidden suite, performance: counted storage and counted operators (no timing on CPU).

Storage is the bytes of the tensors the submission returns (numel * element_size, counted
here): packed int4 is ceil(n / 2) bytes; a QuantizedTensor is its data plus one float32 scale
(and one int8 zero point) per scale group, nothing more. Vectorised quantization runs the same
number of aten operators (probe "ops") whatever the number of groups; a Python loop over
groups does not.
"""

from __future__ import annotations

import math

import pytest
import torch

from grader.sandbox.script import Step
from grader.suites.quantization import reference
from grader.testing import generator


def fields_of(submission, x: torch.Tensor, **options) -> dict:
    steps = [Step("quantize", (x,), options, save_as="qt", send_back=False), Step("qt.to_dict")]
    return submission.script(steps).steps[0][1]


def expected_bytes(numel: int, bits: int, groups: int, symmetric: bool) -> int:
    """Data at bits/8 per element (rounded up to whole bytes), a float32 scale per group and,
    asymmetric, an int8 zero point per group."""
    return math.ceil(numel * bits / 8) + groups * (4 + (0 if symmetric else 1))


@pytest.mark.perf
@pytest.mark.points(3)
@pytest.mark.parametrize("numel", [1, 4095, 4096])
def test_packed_int4_is_exactly_half_a_byte_per_value(submission, numel, record_property):
    q = torch.randint(-8, 8, (numel,), generator=generator("pack-bytes", numel), dtype=torch.int8)
    packed = submission.function("pack_int4")(q)
    counted = reference.nbytes(packed)
    record_property("bytes", counted)
    assert counted == math.ceil(numel / 2), (
        f"{numel} int4 values take {counted} bytes; expected ceil(n/2) = {math.ceil(numel / 2)}"
    )


STORAGE_CASES = [
    ("int4-group128-symmetric", (256, 512), dict(bits=4, granularity="group", group_size=128), 256 * 4, True),
    (
        "int4-group64-asymmetric",
        (64, 256),
        dict(bits=4, symmetric=False, granularity="group", group_size=64),
        64 * 4,
        False,
    ),
    ("int4-tensor-odd", (3, 333), dict(bits=4), 1, True),
    ("int8-channel", (128, 256), dict(bits=8, granularity="channel"), 128, True),
]


@pytest.mark.perf
@pytest.mark.points(4)
@pytest.mark.parametrize(
    ("shape", "options", "groups", "symmetric"), [c[1:] for c in STORAGE_CASES], ids=[c[0] for c in STORAGE_CASES]
)
def test_quantized_tensor_stores_no_more_than_data_plus_scales(
    submission, shape, options, groups, symmetric, record_property
):
    x = torch.randn(shape, generator=generator("storage", shape))
    fields = fields_of(submission, x, **options)
    counted = reference.nbytes(fields)
    bound = expected_bytes(x.numel(), options["bits"], groups, symmetric)
    record_property("bytes", counted)
    record_property("bytes_bound", bound)
    assert counted <= bound, (
        f"{options}: the QuantizedTensor of {x.numel()} values holds {counted:,} bytes; data plus scales need "
        f"{bound:,}. Pack 4-bit values two per byte, keep one float32 scale per group, and no copy of the input."
    )


@pytest.mark.perf
@pytest.mark.points(2)
def test_nf4_stores_half_a_byte_per_value_plus_one_absmax_per_block(submission, record_property):
    x = torch.randn(100, 64, generator=generator("nf4-bytes"))
    counted = reference.nbytes(submission.function("quantize_nf4")(x, 64))
    bound = x.numel() // 2 + 4 * (x.numel() // 64)
    record_property("bytes", counted)
    record_property("bytes_bound", bound)
    assert counted <= bound, f"NF4 of {x.numel()} values holds {counted:,} bytes; codes plus absmax need {bound:,}"


@pytest.mark.perf
@pytest.mark.points(2)
def test_quant_linear_keeps_only_the_packed_weight(submission, record_property):
    """Every tensor the layer holds (QuantLinear.stored_tensors): int4 weight, scales, bias."""
    gen = generator("qlinear-bytes")
    weight, bias = torch.randn(128, 256, generator=gen), torch.randn(128, generator=gen)
    steps = [Step("QuantLinear", (weight, bias), {"bits": 4, "group_size": 64}, save_as="layer", send_back=False)]
    held = submission.script([*steps, Step("layer.stored_tensors")]).steps[0][1]
    counted = reference.nbytes(held)
    bound = expected_bytes(weight.numel(), 4, 128 * 4, True) + reference.nbytes(bias)
    record_property("bytes", counted)
    record_property("bytes_bound", bound)
    assert counted <= bound, (
        f"QuantLinear(bits=4) holds {counted:,} bytes; int4 weight, group scales and bias need {bound:,} "
        "(keep no float copy of W)"
    )


@pytest.mark.perf
@pytest.mark.points(3)
def test_quantize_runs_the_same_operators_for_8x_more_groups(submission, record_property):
    """aten operators counted inside the worker (probe "ops") for 8 and 64 rows of groups."""

    def ops(rows: int) -> int:
        x = torch.randn(rows, 256, generator=generator("ops", rows))
        step = Step(
            "quantize",
            (x,),
            dict(bits=4, symmetric=False, granularity="group", group_size=32),
            send_back=False,
            measure=("ops",),
        )
        return submission.script([step]).measurements[0][0]["ops"]

    small, large = ops(8), ops(64)
    record_property("ops_8_rows", small)
    record_property("ops_64_rows", large)
    assert large <= small + 4, (
        f"quantize ran {small} operators on 8 rows of groups and {large} on 64: vectorise over the groups "
        "(one amax/round/clamp over a [groups, group_size] view), no Python loop"
    )
