"""Hidden suite: published figures. Training compute of GPT-3 175B (Brown et al. 2020, table
D.1: 3.14e23 FLOPs for 300B tokens) and Chinchilla 70B (Hoffmann et al. 2022, table 3: 5.76e23
for 1.4T tokens); PaLM 540B's MFU of 46.2 % (Chowdhery et al. 2022, appendix B: 238.3K tokens/s
on 6144 TPU v4 chips of 275 TFLOP/s, sequences of 2048); HFU against a checkpointed model's
FlopCounterMode count; the ZeRO paper's worked example (Rajbhandari et al. 2020: 7.5B
parameters on 64 GPUs) through training_memory."""

from __future__ import annotations

import math

import pytest

from grader.models.transformer_config import TransformerConfig
from grader.suites.scaling.reference import counted_flops_per_token

GPT3 = TransformerConfig(num_layers=96, d_model=12288, num_heads=96, num_kv_heads=96, d_ff=49152, vocab_size=50257)
CHINCHILLA = TransformerConfig(num_layers=80, d_model=8192, num_heads=64, num_kv_heads=64, d_ff=32768, vocab_size=32000)
# PaLM 540B: 48 heads of 256 on d_model 18432, multi-query attention, SwiGLU MLP 4 * d_model wide.
PALM = TransformerConfig(
    num_layers=118,
    d_model=18432,
    num_heads=48,
    num_kv_heads=1,
    d_ff=73728,
    vocab_size=256000,
    gated_mlp=True,
    head_dim=256,
)
# 156 layers of 4 d^2 + 2 d d_ff = 48e6 weights, plus 6000 x 2000: exactly 7.5e9 parameters.
ZERO_EXAMPLE = TransformerConfig(
    num_layers=156, d_model=2000, num_heads=16, num_kv_heads=16, d_ff=8000, vocab_size=6000
)


@pytest.mark.points(4)
@pytest.mark.parametrize(
    ("cfg", "tokens", "published", "what"),
    [(GPT3, 300e9, 3.14e23, "GPT-3 175B"), (CHINCHILLA, 1.4e12, 5.76e23, "Chinchilla 70B")],
    ids=["gpt3", "chinchilla"],
)
def test_training_compute_matches_the_papers(submission, cfg, tokens, published, what):
    """transformer_flops(cfg, 2048) * tokens within 3 % of the paper's figure (the papers count
    6 N D, without attention: 2.8 % of GPT-3's FLOPs, 4 % of Chinchilla's)."""
    per_token = submission.function("transformer_flops")(cfg, 2048)
    total = per_token * tokens
    assert math.isclose(total, published, rel_tol=0.03), (
        f"{what}: {per_token:.4g} FLOPs per token x {tokens:.3g} tokens = {total:.4g} FLOPs; the paper gives "
        f"{published:.3g} (within 3 %)"
    )


@pytest.mark.points(4)
def test_palm_mfu_is_46_2_percent(submission):
    """PaLM 540B, 238.3K tokens/s on 6144 chips of 275 TFLOP/s, seq 2048: MFU 46.2 % (+- 0.05)."""
    mfu = submission.function("model_flops_utilization")(PALM, 2048, 238.3e3, 6144, 275e12)
    assert abs(mfu - 0.462) < 5e-4, (
        f"model_flops_utilization gives {mfu:.4f} for PaLM 540B; the paper reports 0.462. MFU counts the "
        f"model's own FLOPs (dense attention, no recomputation): tokens/s x FLOPs per token / (chips x peak)"
    )


@pytest.mark.points(3)
def test_hfu_counts_recomputation_and_mfu_does_not(submission):
    """TinyGPT's shape at seq 32: HFU with recompute = tokens/s x the FLOPs FlopCounterMode counts
    on the checkpointed model / (GPUs x peak); MFU and HFU without recompute use the plain count."""
    cfg = TransformerConfig(2, 64, 4, 2, 256, 97)
    tokens_per_second, gpus, peak = 3.0e6, 8, 1.0e14
    executed = counted_flops_per_token(cfg, 32, True, recompute=True)
    model = counted_flops_per_token(cfg, 32, True)
    hfu = submission.function("hardware_flops_utilization")
    mfu = submission.function("model_flops_utilization")(cfg, 32, tokens_per_second, gpus, peak)
    expected = {"HFU": tokens_per_second * executed / (gpus * peak), "MFU": tokens_per_second * model / (gpus * peak)}
    got = {"HFU": hfu(cfg, 32, tokens_per_second, gpus, peak, True), "MFU": mfu}
    for name in got:
        assert math.isclose(got[name], expected[name], rel_tol=1e-12), (
            f"{name}: got {got[name]}, expected {expected[name]}"
        )
    plain = hfu(cfg, 32, tokens_per_second, gpus, peak, False)
    assert math.isclose(plain, mfu, rel_tol=1e-12), f"HFU without recomputation ({plain}) must equal MFU ({mfu})"


@pytest.mark.points(5)
def test_training_memory_reproduces_the_zero_papers_worked_example(submission):
    """7.5e9 parameters on 64 data-parallel GPUs, mixed-precision Adam: parameters + gradients +
    optimizer state = 120, 31.4, 16.6, 1.875 GB for ZeRO stages 0 to 3."""
    memory = submission.function("training_memory")
    count = submission.function("parameter_count")(ZERO_EXAMPLE)
    assert count == 7_500_000_000, f"parameter_count of the 7.5e9 example gives {count:,}"
    for stage, want in enumerate([120e9, 31.40625e9, 16.640625e9, 1.875e9]):
        got = memory(ZERO_EXAMPLE, 1, 1024, dp=64, zero_stage=stage)
        states = got["parameters"] + got["gradients"] + got["optimizer"]
        assert math.isclose(states, want, rel_tol=1e-12), (
            f"ZeRO stage {stage}, 7.5e9 parameters on 64 GPUs: parameters + gradients + optimizer = {states:.5g} "
            f"bytes, the paper gives {want:.5g} (2 + 2 + 12 bytes per parameter, sharded by stage)"
        )
