"""Hidden suite: transformer_flops and parameter_count against torch's FlopCounterMode on the
course's own models (TinyGPT of grader/models/tiny_gpt.py, with GQA, MQA and a swapped-in SwiGLU
MLP; module zero's given Transformer), forward and forward + backward, with every block
checkpointed for recompute; causal counting against an enumeration of the keys each query sees;
the 6N + 12 L s d_attn estimate against the exact count."""

from __future__ import annotations

import pytest
import torch

from grader.models.transformer_config import TransformerConfig
from grader.suites.scaling.reference import (
    causal_flops_by_enumeration,
    counted_flops_per_token,
    torch_matmul_weights,
    zero_transformer_config,
)
from grader.testing import generator

# (config, what it covers): seq lengths are drawn per run.
TINY_GPT_CONFIGS = [
    (TransformerConfig(2, 64, 4, 2, 256, 97), "TinyGPT as given (GQA, 4 query heads on 2 KV heads)"),
    (TransformerConfig(1, 32, 4, 4, 64, 11), "multi-head attention (num_kv_heads = num_heads)"),
    (TransformerConfig(2, 48, 6, 1, 96, 50), "multi-query attention (one KV head)"),
    (TransformerConfig(3, 48, 6, 2, 80, 50, gated_mlp=True), "a gated MLP (SwiGLU, d_ff not a multiple of d_model)"),
]


def _seq_lens(*salt: object) -> list[int]:
    """Three distinct sequence lengths from 1 to 40 drawn from the run's seed: two even, one odd."""
    gen = generator("scaling-seq", *salt)
    even = (2 * (torch.randperm(20, generator=gen)[:2] + 1)).tolist()
    return [*even, 2 * int(torch.randint(0, 20, (1,), generator=gen)) + 1]


def _check_against_counter(flops, cfg, what, seq_len, training, model="tiny_gpt", recompute=False) -> int:
    """Assert transformer_flops equals FlopCounterMode's count; return the count."""
    expected = counted_flops_per_token(cfg, seq_len, training, recompute, model)
    got = flops(cfg, seq_len, training, recompute) if recompute else flops(cfg, seq_len, training)
    mode = "forward + backward with recomputation" if recompute else ("forward + backward" if training else "forward")
    assert got == expected, (
        f"{what}, seq_len={seq_len}, {mode}: transformer_flops gives {got:,} FLOPs per token, FlopCounterMode "
        f"counts {expected:,} ({got / expected:.4f}x). Count every matmul: 2 FLOPs per multiply-add; K and V "
        f"use num_kv_heads; scores and values cost 2 * 2 * num_heads * head_dim per key; a gated MLP has 3 matrices"
    )
    return expected


@pytest.mark.points(8)
@pytest.mark.parametrize(("cfg", "what"), TINY_GPT_CONFIGS, ids=["gqa", "mha", "mqa", "gated"])
def test_transformer_flops_equal_the_flop_counter_on_tiny_gpt(submission, cfg, what, record_property):
    """Forward and forward + backward of TinyGPT in the config's shape, 3 sequence lengths per
    run (one odd): FLOPs per token equal FlopCounterMode's count exactly."""
    flops = submission.function("transformer_flops")
    counted = {}
    for seq_len in _seq_lens(what):
        for training in (False, True):
            mode = "training" if training else "forward"
            counted[f"{mode} s={seq_len}"] = _check_against_counter(flops, cfg, what, seq_len, training)
    record_property("flop_counter_per_token", counted)


@pytest.mark.points(4)
def test_transformer_flops_equal_the_flop_counter_on_module_zeros_transformer(submission):
    """Module zero's Transformer(width) (2 blocks, 2 heads, MLP 2 * width, linear head): forward
    and forward + backward, widths 16 and 24, equal to FlopCounterMode."""
    flops = submission.function("transformer_flops")
    for width, seq_len in ((16, 8), (24, _seq_lens("zero")[2])):
        for training in (False, True):
            what = f"module zero's Transformer({width})"
            _check_against_counter(flops, zero_transformer_config(width), what, seq_len, training, model="zero")


@pytest.mark.points(5)
def test_recompute_adds_one_forward_of_the_layers_as_a_checkpointed_model_counts(submission):
    """TinyGPT with every block under torch.utils.checkpoint (early stop off: the whole block
    is rerun), forward + backward: FlopCounterMode counts the recomputed layers too; the LM head
    is not recomputed."""
    flops = submission.function("transformer_flops")
    for cfg, what in (TINY_GPT_CONFIGS[0], TINY_GPT_CONFIGS[3]):
        _check_against_counter(flops, cfg, what, _seq_lens("recompute", what)[0], True, recompute=True)


@pytest.mark.points(4)
def test_causal_counts_the_keys_each_query_sees(submission):
    """causal=True, forward: query i attends i + 1 keys; per token the average over the sequence,
    counted position by position here. Odd and even lengths, GQA and gated configs."""
    flops = submission.function("transformer_flops")
    for cfg, what in TINY_GPT_CONFIGS:
        for seq_len in (1, 2, 7, 64):
            expected = causal_flops_by_enumeration(cfg, seq_len)
            got = flops(cfg, seq_len, False, False, True)
            assert got == expected, (
                f"{what}, seq_len={seq_len}, causal forward: got {got:,} FLOPs per token, expected {expected:,}: "
                f"query i sees i + 1 keys, (seq_len + 1) / 2 on average"
            )
            dense_training = flops(cfg, seq_len, True, False, False)
            causal_training = flops(cfg, seq_len, True, False, True)
            assert causal_training == 3 * expected, (
                f"{what}, seq_len={seq_len}: causal forward + backward is {causal_training:,}, "
                f"expected 3 x {expected:,}"
            )
            assert causal_training <= dense_training


@pytest.mark.points(3)
def test_parameter_count_equals_the_matmul_weights_torch_holds(submission):
    """TinyGPT in each config's shape: the elements of its Linear weights plus the token
    embedding (tied to the LM head), as torch reports them."""
    count = submission.function("parameter_count")
    for cfg, what in TINY_GPT_CONFIGS:
        expected = torch_matmul_weights(cfg)
        got = count(cfg)
        assert got == expected, f"{what}: parameter_count gives {got:,}, TinyGPT's matmul weights are {expected:,}"


@pytest.mark.points(3)
def test_six_n_estimate_is_exact_with_matmul_weights_and_misses_only_attention(submission):
    """Dense attention: transformer_flops(cfg, s) = 6 N + 12 L s d_attn with N = parameter_count;
    6N alone misses exactly the attention share 12 L s d_attn / total, below s / (6 d) for a
    block with MHA and a 4d MLP (GPT-3 175B at s = 2048: 2.7 %)."""
    flops, count = submission.function("transformer_flops"), submission.function("parameter_count")
    cases = [
        (TransformerConfig(96, 12288, 96, 96, 4 * 12288, 50257), 2048, "GPT-3 175B"),
        (TransformerConfig(24, 1024, 16, 16, 4096, 50257), 1024, "GPT-2 medium"),
        (TransformerConfig(2, 64, 4, 2, 256, 97), 512, "TinyGPT"),
    ]
    for cfg, seq_len, what in cases:
        n, exact = count(cfg), flops(cfg, seq_len)
        attention = 12 * cfg.num_layers * seq_len * cfg.d_model
        assert exact == 6 * n + attention, (
            f"{what}, s={seq_len}: transformer_flops = {exact:,}, 6N + 12 L s d = {6 * n + attention:,} with "
            f"N = parameter_count = {n:,}; they are equal when every matmul is counted once forward and twice backward"
        )
        if cfg.num_kv_heads == cfg.num_heads:
            share = (exact - 6 * n) / exact
            assert share < seq_len / (6 * cfg.d_model), f"{what}: the attention share {share:.3%} exceeds s / (6d)"


@pytest.mark.points(1)
def test_utilization_accepts_one_gpu_and_any_positive_rate(submission):
    """ "Positive" means > 0: one GPU, half a token a second and a peak of 0.5 FLOP/s are valid
    and give tokens_per_second * transformer_flops(training=True) / (n_gpus * peak_flops)."""
    cfg = TransformerConfig(num_layers=2, d_model=64, num_heads=4, num_kv_heads=4, d_ff=256, vocab_size=100)
    per_token = submission.function("transformer_flops")(cfg, 16, training=True)
    for name in ("model_flops_utilization", "hardware_flops_utilization"):
        args = (cfg, 16, 0.5, 1, 0.5) if name == "model_flops_utilization" else (cfg, 16, 0.5, 1, 0.5, False)
        got = submission.function(name)(*args)
        assert got == pytest.approx(per_token), (
            f"{name}(cfg, 16, tokens_per_second=0.5, n_gpus=1, peak_flops=0.5) = {got}, expected {per_token}: "
            f"refuse only values <= 0"
        )
