"""Module scaling: every counted check both ways (the reference passes it, a wrong variant in
tests/variants/scaling/ fails it with a message that says what to fix), the FLOP counter is not
blind, and training_memory's model states are module zero's ZeRO formula (solutions/zero/memory.py),
called here on the same parameter count."""

from __future__ import annotations

import math
from functools import partial
from pathlib import Path

import pytest
import torch
from conftest import grade_variant, load_solution, module_results

from grader.models.transformer_config import TransformerConfig

ROOT = Path(__file__).resolve().parent.parent
TINY_GPT = "test_transformer_flops_equal_the_flop_counter_on_tiny_gpt"
PALM = "test_palm_mfu_is_46_2_percent"
HFU = "test_hfu_counts_recomputation_and_mfu_does_not"
PUBLISHED_FIT = "test_fit_recovers_the_published_parameters_where_least_squares_on_raw_loss_does_not"


grade = partial(grade_variant, "scaling")  # grade(tmp_path, variant, select)


@pytest.fixture(scope="module")
def reference(solutions_results) -> dict[str, dict]:
    return module_results(solutions_results, "scaling")


def test_reference_matches_the_flop_counter_which_is_not_blind(reference):
    for case in ("gqa", "mha", "mqa", "gated"):
        test = reference[f"{TINY_GPT}[{case}]"]
        assert test["status"] == "passed", test["output"]
        counted = test["extra_data"]["flop_counter_per_token"]
        assert len(counted) == 6 and min(counted.values()) > 1000, counted
        forward, training = (
            {k.split()[1]: v for k, v in counted.items() if k.startswith(m)} for m in ("forward", "training")
        )
        assert all(training[s] == 3 * forward[s] for s in forward), counted
    for name in (PALM, HFU, PUBLISHED_FIT):
        assert reference[name]["status"] == "passed", reference[name]["output"]
    fit = reference[PUBLISHED_FIT]["extra_data"]
    assert abs(fit["fit"]["beta"] - 0.3658) < 0.005 and abs(fit["least_squares_fit"]["beta"] - 0.3658) > 0.05, fit


def test_ignoring_grouped_query_attention_fails_the_gqa_and_mqa_counts_only(tmp_path):
    tests = grade(tmp_path, "ignores_grouped_query_attention", "flop_counter_on_tiny_gpt")
    for case, status in (("gqa", "failed"), ("mqa", "failed"), ("gated", "failed"), ("mha", "passed")):
        assert tests[f"{TINY_GPT}[{case}]"]["status"] == status, tests[f"{TINY_GPT}[{case}]"]["output"]
    assert "K and V use num_kv_heads" in tests[f"{TINY_GPT}[gqa]"]["output"]


def test_mfu_that_counts_recomputation_fails_palm_and_the_hfu_check(tmp_path):
    tests = grade(tmp_path, "mfu_counts_recomputation", "palm or hfu")
    assert tests[PALM]["status"] == tests[HFU]["status"] == "failed"
    assert "no recomputation" in tests[PALM]["output"]


def test_least_squares_on_raw_loss_lands_elsewhere_and_is_told_so(tmp_path):
    tests = grade(tmp_path, "least_squares_on_raw_loss", "published_parameters")
    assert tests[PUBLISHED_FIT]["status"] == "failed"
    assert "lands near the least-squares fit on raw loss" in tests[PUBLISHED_FIT]["output"]


def test_the_suites_copy_of_module_zeros_transformer_counts_the_same_flops():
    """The hidden suite counts FLOPs on a copy of zero's given Transformer (so that it needs no
    other module's files): FlopCounterMode counts the same on the copy and on the course's own."""
    from torch.utils.flop_counter import FlopCounterMode

    from grader.suites.scaling.reference import ZeroTransformer

    zero = load_solution("zero", "ddp.py")
    x = torch.randn(2, 9, 24)
    counts = []
    for model in (zero.Transformer(24), ZeroTransformer(24)):
        counter = FlopCounterMode(display=False)
        with counter:
            model(x).sum().backward()
        counts.append(counter.get_total_flops())
    assert counts[0] == counts[1] > 0, counts
    assert [p.shape for p in zero.Transformer(24).parameters()] == [p.shape for p in ZeroTransformer(24).parameters()]


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
@pytest.mark.parametrize(("dp", "tp", "pp", "dtype"), [(8, 1, 1, "bf16"), (4, 2, 4, "fp16"), (3, 4, 2, "fp32")])
def test_training_memory_model_states_are_module_zeros_formula(stage, dp, tp, pp, dtype):
    """parameters + gradients + optimizer of training_memory = zero_memory_per_rank(Psi / (tp pp),
    dp, stage, bytes of the dtype), module zero's reference."""
    memory = load_solution("scaling", "memory.py")
    zero = load_solution("zero", "memory.py")
    cfg = TransformerConfig(num_layers=8, d_model=512, num_heads=8, num_kv_heads=8, d_ff=2048, vocab_size=32000)
    got = memory.training_memory(cfg, 1, 128, dp=dp, tp=tp, pp=pp, zero_stage=stage, dtype=dtype)
    psi = memory.parameter_count(cfg) / (tp * pp)
    want = zero.zero_memory_per_rank(psi, dp, stage, *memory.MODEL_STATE_BYTES[dtype])
    assert math.isclose(got["parameters"] + got["gradients"] + got["optimizer"], want, rel_tol=1e-12)


@pytest.mark.parametrize("selective_recompute", [False, True], ids=["full-activations", "selective-recompute"])
@pytest.mark.parametrize("sequence_parallel", [False, True], ids=["tp", "tp+sp"])
def test_activation_term_is_module_tensor_parallels_formula(sequence_parallel, selective_recompute):
    """scaling's activation_bytes_per_layer and tensor_parallel's tp_activation_bytes are the same
    formula (Korthikanti et al. 2022, table 2): equal on the paper's models at t = 1, 2, 4, 8."""
    memory = load_solution("scaling", "memory.py")
    tensor_parallel = load_solution("tensor_parallel", "memory.py")
    models = [(2048, 4, 6144, 64), (2048, 1, 12288, 96), (2048, 1, 20480, 128), (4096, 2, 4096, 32)]
    for s, b, h, a in models:
        for t in (1, 2, 4, 8):
            args = (s, b, h, a, t, sequence_parallel, selective_recompute)
            assert memory.activation_bytes_per_layer(*args) == tensor_parallel.tp_activation_bytes(*args), args
