"""Hidden suite: activation_bytes_per_layer against Korthikanti et al. 2022, table 2 (each row,
with and without selective recomputation, tensor-parallel sizes that leave fractions), and
training_memory's split over tp, pp, dp and ZeRO stages, recomputation and dtypes; training_time
and gpu_hours; every documented ValueError."""

from __future__ import annotations

import math
from functools import partial

import pytest

from grader.models.transformer_config import TransformerConfig
from grader.suites.scaling.reference import raised
from grader.testing import expect_exception

CFG = TransformerConfig(num_layers=8, d_model=256, num_heads=8, num_kv_heads=4, d_ff=1024, vocab_size=1000)


def korthikanti(s: int, b: int, h: int, a: int, t: int, sequence_parallel: bool, selective: bool) -> float:
    """Table 2 of Korthikanti et al. 2022, written row by row."""
    if sequence_parallel:
        return 34 * s * b * h / t if selective else s * b * h / t * (34 + 5 * a * s / h)
    if selective:
        return s * b * h * (10 + 24 / t)
    return s * b * h * (10 + 24 / t + 5 * a * s / (h * t))


@pytest.mark.points(6)
def test_activation_bytes_follow_every_row_of_korthikantis_table(submission):
    """Sizes (s, b, h, a, t) including t = 1 and t = 3 (24 / t not an integer); every combination
    of sequence parallelism and selective recomputation."""
    activation = submission.function("activation_bytes_per_layer")
    for s, b, h, a, t in ((2048, 1, 12288, 96, 8), (512, 3, 768, 12, 3), (100, 2, 64, 4, 1), (1, 1, 8, 2, 2)):
        for sequence_parallel in (False, True):
            for selective in (False, True):
                want = korthikanti(s, b, h, a, t, sequence_parallel, selective)
                got = activation(s, b, h, a, t, sequence_parallel, selective)
                assert math.isclose(got, want, rel_tol=1e-12), (
                    f"activation_bytes_per_layer(s={s}, b={b}, h={h}, a={a}, t={t}, sequence_parallel="
                    f"{sequence_parallel}, selective_recompute={selective}) = {got:.6g}, table 2 gives {want:.6g}"
                )


@pytest.mark.points(6)
def test_training_memory_splits_model_states_over_tp_pp_and_zero(submission):
    """Weights, gradients and optimizer state: Psi / (tp pp) parameters, bytes (2, 2, 12) for
    bf16 and fp16 and (4, 4, 8) for fp32, ZeRO stage s dividing the last s of them by dp; the
    total is the sum of the four parts."""
    memory, count = submission.function("training_memory"), submission.function("parameter_count")
    psi = count(CFG)
    cases = [
        (dict(dp=4, tp=2, pp=2, zero_stage=1, dtype="bf16"), (2, 2, 12 / 4), 4),
        (dict(dp=3, tp=4, pp=1, zero_stage=2, dtype="fp16"), (2, 2 / 3, 12 / 3), 4),
        (dict(dp=5, tp=1, pp=8, zero_stage=3, dtype="fp32"), (4 / 5, 4 / 5, 8 / 5), 8),
        (dict(dp=2, tp=1, pp=4, zero_stage=0, dtype="fp32"), (4, 4, 8), 4),
    ]
    for kwargs, per_param, split in cases:
        got = memory(CFG, 2, 128, **kwargs)
        params = psi / split
        for part, bytes_per_param in zip(("parameters", "gradients", "optimizer"), per_param):
            assert math.isclose(got[part], bytes_per_param * params, rel_tol=1e-12), (
                f"training_memory(..., {kwargs})[{part!r}] = {got[part]:.6g}, expected {bytes_per_param:.4g} bytes x "
                f"{params:.6g} parameters per GPU (parameter_count / (tp * pp))"
            )
        parts = got["parameters"] + got["gradients"] + got["optimizer"] + got["activations"]
        assert math.isclose(got["total"], parts, rel_tol=1e-12), f"total {got['total']} is not the sum {parts}"


@pytest.mark.points(6)
def test_training_memory_activations_for_each_recompute_mode(submission):
    """num_layers x the per-layer formula (none, selective), 2 s b h per layer for full (/ tp with
    sequence parallelism), whatever pp is (1F1B keeps L layers' worth on the first stage); fp32
    doubles them."""
    memory = submission.function("training_memory")
    s, b, h, a, layers = 256, 2, CFG.d_model, CFG.num_heads, CFG.num_layers
    for tp, pp, sequence_parallel in ((1, 1, False), (2, 4, False), (4, 2, True)):
        expected = {
            "none": layers * korthikanti(s, b, h, a, tp, sequence_parallel, False),
            "selective": layers * korthikanti(s, b, h, a, tp, sequence_parallel, True),
            "full": layers * 2 * s * b * h / (tp if sequence_parallel else 1),
        }
        for recompute, want in expected.items():
            for dtype, scale in (("bf16", 1), ("fp32", 2)):
                got = memory(CFG, b, s, 1, tp, pp, 0, recompute, dtype, sequence_parallel)["activations"]
                assert math.isclose(got, scale * want, rel_tol=1e-12), (
                    f"activations with tp={tp}, pp={pp}, sequence_parallel={sequence_parallel}, "
                    f"recompute={recompute!r}, dtype={dtype}: got {got:.6g} bytes, expected {scale * want:.6g}"
                )


# Sizes that divide nothing: d_model 9 (head_dim given), tp * pp = 12 parameters per GPU.
CFG_ODD = TransformerConfig(num_layers=3, d_model=9, num_heads=4, num_kv_heads=2, d_ff=14, vocab_size=7, head_dim=3)


@pytest.mark.points(2)
def test_memory_keeps_the_fraction_where_a_split_does_not_divide(submission):
    """Bytes are divided, never floored: activation_bytes_per_layer at (s, b, h, a, t) =
    (3, 1, 5, 1, 2), an odd sum over t = 2; training_memory's Psi / (tp pp) with a parameter
    count that 12 does not divide, and full recomputation's 2 s b h / tp at h = 9, tp = 4."""
    activation, memory = submission.function("activation_bytes_per_layer"), submission.function("training_memory")
    for sequence_parallel in (False, True):
        want, got = (
            korthikanti(3, 1, 5, 1, 2, sequence_parallel, False),
            activation(3, 1, 5, 1, 2, sequence_parallel, False),
        )
        assert math.isclose(got, want, rel_tol=1e-12), (
            f"activation_bytes_per_layer(3, 1, 5, 1, tp=2, sequence_parallel={sequence_parallel}) = {got}, expected "
            f"{want}: divide by t with /, not // (bytes per GPU need not be whole)"
        )
    psi = submission.function("parameter_count")(CFG_ODD)
    got = memory(CFG_ODD, 1, 1, 1, 4, 3, 0, "full", "bf16", True)
    for part, want in (("parameters", 2 * psi / 12), ("activations", 3 * 2 * 1 * 1 * 9 / 4)):
        assert math.isclose(got[part], want, rel_tol=1e-12), (
            f"training_memory(d_model=9, tp=4, pp=3, recompute='full', sequence_parallel=True)[{part!r}] = "
            f"{got[part]}, expected {want}: divide with /, not //"
        )


@pytest.mark.points(3)
def test_training_time_and_gpu_hours(submission):
    """GPT-3's 3.14e23 FLOPs on 1024 GPUs of 312 TFLOP/s at 40 % MFU: 28.4 days, 699,000
    GPU-hours; GPU-hours do not depend on the number of GPUs."""
    days = submission.function("training_time")(3.14e23, 1024, 312e12, 0.4)
    hours = submission.function("gpu_hours")(3.14e23, 312e12, 0.4)
    want_days = 3.14e23 / (1024 * 312e12 * 0.4) / 86400
    assert math.isclose(days, want_days, rel_tol=1e-12), f"training_time: {days} days, expected {want_days}"
    assert math.isclose(hours, want_days * 24 * 1024, rel_tol=1e-12), (
        f"gpu_hours: {hours}, expected {want_days * 24 * 1024} (days x 24 x GPUs)"
    )
    assert math.isclose(submission.function("training_time")(1e21, 1, 1e15, 1.0), 1e6 / 86400, rel_tol=1e-12)


BAD_CONFIGS = [
    (TransformerConfig(2, 64, 3, 3, 256, 97), "num_heads"),  # 3 heads do not divide d_model 64
    (TransformerConfig(2, 64, 4, 3, 256, 97), "num_kv_heads"),  # 3 KV heads do not divide 4 heads
    (TransformerConfig(-1, 64, 4, 2, 256, 97), "num_layers"),
    (TransformerConfig(2, 0, 4, 2, 256, 97), "d_model"),
    (TransformerConfig(2, 64, 4, 2, -256, 97), "d_ff"),
    (TransformerConfig(2, 64, 4, 2, 256, 0), "vocab_size"),
    (TransformerConfig(2, 64, 0, 1, 256, 97), "num_heads"),
    (TransformerConfig(2, 64, 4, 0, 256, 97), "num_kv_heads"),
    (TransformerConfig(2, 64, 4, 2, 256, 97, head_dim=-8), "head_dim"),
    (TransformerConfig(2, 64, 4, 2, 256.0, 97), "d_ff"),  # a float is not a size
    (TransformerConfig(2.5, 64, 4, 2, 256, 97), "num_layers"),
]


@pytest.mark.points(5)
def test_invalid_configs_raise_value_error_naming_the_field(submission):
    """Each bad field alone (zero, negative, not an integer, not dividing), through check_config,
    parameter_count, transformer_flops and training_memory; head_dim set makes 3 heads on
    d_model 64 valid."""
    for name in ("check_config", "parameter_count", "transformer_flops", "training_memory"):
        function = submission.function(name)
        extra = {"transformer_flops": (16,), "training_memory": (1, 16)}.get(name, ())
        for cfg, field in BAD_CONFIGS:
            error = expect_exception("ValueError", partial(function, cfg, *extra))
            assert field in raised(error), f"{name}({cfg}) raised ValueError without naming {field}: {raised(error)}"
    submission.function("check_config")(TransformerConfig(2, 64, 3, 3, 256, 97, head_dim=16))


@pytest.mark.points(4)
def test_bad_run_arguments_raise_value_error_naming_them(submission):
    """seq_len < 1, recompute without training; tokens/s, GPUs and peak not positive, and a bad
    config or seq_len through model_flops_utilization; sizes
    below 1, pp not dividing num_layers, tp not dividing num_heads, an unknown ZeRO stage,
    recompute mode or dtype; mfu outside (0, 1]."""
    flops, mfu = submission.function("transformer_flops"), submission.function("model_flops_utilization")
    memory = submission.function("training_memory")
    activation = submission.function("activation_bytes_per_layer")
    cases = [
        (lambda: flops(CFG, 0), "seq_len"),
        (lambda: flops(CFG, 16, False, True), "recompute"),
        (lambda: mfu(CFG, 16, 0.0, 8, 1e15), "tokens_per_second"),
        (lambda: mfu(BAD_CONFIGS[0][0], 16, 1e5, 8, 1e15), "num_heads"),
        (lambda: mfu(CFG, 0, 1e5, 8, 1e15), "seq_len"),
        (lambda: mfu(CFG, 16, 1e5, 0, 1e15), "n_gpus"),
        (lambda: mfu(CFG, 16, 1e5, 8, -1.0), "peak_flops"),
        (lambda: submission.function("hardware_flops_utilization")(CFG, 16, 1e5, -8, 1e15), "n_gpus"),
        (lambda: memory(CFG, 0, 16), "micro_batch"),
        (lambda: memory(CFG, 1, -16), "seq_len"),
        (lambda: memory(CFG, 1, 16, dp=0), "dp"),
        (lambda: memory(CFG, 1, 16, tp=0), "tp"),
        (lambda: memory(CFG, 1, 16, pp=3), "pp"),
        (lambda: memory(CFG, 1, 16, tp=3), "tp"),
        (lambda: memory(CFG, 1, 16, zero_stage=4), "zero_stage"),
        (lambda: memory(CFG, 1, 16, recompute="half"), "recompute"),
        (lambda: memory(CFG, 1, 16, dtype="int8"), "dtype"),
        (lambda: activation(16, 1, 64, 4, 0, False, False), "tp"),
        (lambda: activation(16, -1, 64, 4, 1, False, False), "micro_batch"),
        (lambda: submission.function("training_time")(1e20, 8, 1e15, 1.5), "mfu"),
        (lambda: submission.function("training_time")(-1e20, 8, 1e15, 0.5), "total_flops"),
        (lambda: submission.function("training_time")(1e20, 0, 1e15, 0.5), "n_gpus"),
        (lambda: submission.function("gpu_hours")(1e20, 0.0, 0.5), "peak_flops"),
        (lambda: submission.function("gpu_hours")(1e20, 1e15, 0.0), "mfu"),
        (lambda: submission.function("gpu_hours")(1e20, 1e15, 40.0), "mfu"),  # 40 meaning 40 %: not a fraction
        (lambda: submission.function("gpu_hours")(1e20, 1e15, 1.0 + 1e-9), "mfu"),
        (lambda: submission.function("gpu_hours")(-1e20, 1e15, 0.5), "total_flops"),
        (lambda: submission.function("training_time")(1e20, 8, 0.0, 0.5), "peak_flops"),
        (lambda: submission.function("training_time")(1e20, 8, 1e15, 0.0), "mfu"),
    ]
    for call, field in cases:
        error = expect_exception("ValueError", call)
        assert field in raised(error), f"a bad {field} raised ValueError without naming it: {raised(error)}"
