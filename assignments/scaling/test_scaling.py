"""Public tests for the scaling module: run them while you work with

    pytest assignments/scaling               (add -s to see what your code prints)

Your code runs in a worker process, never inside pytest; here the FLOPs of the given TinyGPT
(grader/models/tiny_gpt.py) are counted with torch's FlopCounterMode. The hidden suite checks
more: GQA, MQA and gated configs, module zero's transformer, recomputation, causal counting,
GPT-3's and Chinchilla's training compute, every row of Korthikanti et al.'s activation table,
the fit on all 245 points and on synthetic data, a brute-force compute-optimal search, and every
documented ValueError; `make grade` gives the score.
"""

from __future__ import annotations

import math

import torch
from torch.utils.flop_counter import FlopCounterMode

from grader.models.chinchilla import chinchilla_points
from grader.models.tiny_gpt import TinyGPT, TinyGPTConfig
from grader.models.transformer_config import TransformerConfig
from grader.testing import expect_exception


def test_transformer_flops_equal_what_flop_counter_mode_counts_on_tiny_gpt(submission):
    config = TinyGPTConfig(vocab_size=97, max_seq_len=16, num_layers=2, d_model=64, num_heads=4, num_kv_heads=2)
    model = TinyGPT.from_seed(config, seed=0)
    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        model(torch.zeros(1, 16, dtype=torch.long))
    cfg = TransformerConfig(num_layers=2, d_model=64, num_heads=4, num_kv_heads=2, d_ff=256, vocab_size=97)
    got = submission.function("transformer_flops")(cfg, 16, training=False)
    assert got == counter.get_total_flops() // 16, (
        f"forward FLOPs per token: {got}, FlopCounterMode: {counter.get_total_flops() // 16}"
    )
    assert submission.function("transformer_flops")(cfg, 16) == 3 * got, "training = forward + backward = 3x forward"


def test_palm_540b_mfu_is_46_percent(submission):
    palm = TransformerConfig(118, 18432, 48, 1, 73728, 256000, gated_mlp=True, head_dim=256)
    mfu = submission.function("model_flops_utilization")(palm, 2048, 238.3e3, 6144, 275e12)
    assert abs(mfu - 0.462) < 5e-4, f"PaLM 540B: MFU {mfu:.4f}, the paper reports 0.462"


def test_hfu_counts_the_recomputed_forward_of_the_layers_but_not_of_the_lm_head(submission):
    cfg = TransformerConfig(num_layers=2, d_model=64, num_heads=4, num_kv_heads=4, d_ff=256, vocab_size=100)
    # Per token at seq_len 16, per layer: Q, K, V, O 2 * 4 * 64 * 64 = 32768, MLP 2 * 2 * 64 * 256 = 65536,
    # scores and weighted sum 2 * 2 * 64 * 16 = 4096: 102400; LM head 2 * 64 * 100 = 12800.
    # Forward 2 * 102400 + 12800 = 217600; training 3x = 652800; recomputation adds 2 * 102400: 857600.
    hfu = submission.function("hardware_flops_utilization")
    for recompute, expected in ((True, 0.8576), (False, 0.6528)):
        got = hfu(cfg, 16, 1000.0, 1, 1e9, recompute)  # 1000 tokens/s on one GPU of 1e9 FLOP/s
        assert math.isclose(got, expected, rel_tol=1e-9), (
            f"HFU with recompute={recompute}: got {got}, expected {expected} "
            f"= 1000 tokens/s x {expected * 1e6:.0f} FLOPs per token (transformer_flops with training=True, "
            f"recompute={recompute}) / 1e9 FLOP/s"
        )


def test_training_memory_stage_3_shards_16_bytes_per_parameter(submission):
    cfg = TransformerConfig(num_layers=156, d_model=2000, num_heads=16, num_kv_heads=16, d_ff=8000, vocab_size=6000)
    got = submission.function("training_memory")(cfg, 1, 1024, dp=64, zero_stage=3)
    states = got["parameters"] + got["gradients"] + got["optimizer"]
    assert math.isclose(states, 16 * 7.5e9 / 64), f"ZeRO-3, 7.5e9 parameters on 64 GPUs: {states:.4g} bytes"


def test_fit_recovers_the_chinchilla_replication(submission):
    n, d, loss = chinchilla_points()  # the 240 points Besiroglu et al. 2024 fitted
    fit = submission.function("fit_scaling_law")(n, d, loss)
    assert abs(fit["alpha"] - 0.3478) < 0.005 and abs(fit["beta"] - 0.3658) < 0.005, f"fit: {fit}"
    assert abs(fit["E"] / 1.82 - 1) < 0.01, f"fit: {fit}"


def test_compute_optimal_satisfies_the_budget(submission):
    fit = {"E": 1.82, "A": 482.01, "B": 2085.43, "alpha": 0.3478, "beta": 0.3658}
    n, d = submission.function("compute_optimal")(5.76e23, fit)
    assert math.isclose(6 * n * d, 5.76e23), "C = 6 N D"
    assert 15 <= d / n <= 25, f"{d / n:.1f} tokens per parameter at Chinchilla's budget"


def test_a_config_whose_heads_do_not_divide_d_model_is_refused(submission):
    cfg = TransformerConfig(num_layers=2, d_model=64, num_heads=3, num_kv_heads=3, d_ff=256, vocab_size=97)
    error = expect_exception("ValueError", lambda: submission.function("transformer_flops")(cfg, 16))
    assert "num_heads" in error.message


def test_training_time_and_gpu_hours_of_a_1b_model_on_20b_tokens(submission):
    flops = 6 * 1e9 * 20e9  # C = 6 N D = 1.2e20
    # on 8 GPUs of 1e15 FLOP/s at 50 % MFU: 1.2e20 / 4e15 = 30,000 s; 8 GPUs x 30,000 s = 240,000 GPU-seconds
    days = submission.function("training_time")(flops, 8, 1e15, 0.5)
    assert math.isclose(days, 30_000 / 86_400, rel_tol=1e-9), f"training_time: {days} days, expected 30,000 s in days"
    hours = submission.function("gpu_hours")(flops, 1e15, 0.5)
    assert math.isclose(hours, 240_000 / 3600, rel_tol=1e-9), (
        f"gpu_hours: {hours}, expected {240_000 / 3600:.2f} = 8 GPUs x 30,000 s in hours (on any number of GPUs)"
    )
