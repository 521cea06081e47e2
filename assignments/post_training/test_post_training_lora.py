"""Public tests for lora.py (LoRA, lecture 16 section 2): run them while you work with

    pytest assignments/post_training/test_post_training_lora.py

Your code runs in a worker process, never inside pytest: a Step builds your LoRALinear there and
later Steps call its methods (grader/sandbox/script.py). The hidden suite checks more: other
shapes and ranks, the initialisation, gradients, dropout in train and eval mode, add_lora with
several target sets, lora_memory on TinyGPTs of other shapes (one too large to build), and every
ValueError the docstrings promise.
"""

from __future__ import annotations

import torch
from torch import nn

from grader.models.tiny_gpt import TinyGPT, TinyGPTConfig
from grader.sandbox import Saved, Step
from grader.testing import assert_matches

CONFIG = TinyGPTConfig(max_seq_len=32)  # the module's TinyGPT: d_model 64, 4 heads, 2 kv heads, 2 blocks


def _base_layer() -> nn.Linear:
    torch.manual_seed(0)
    return nn.Linear(8, 6).double()


def test_a_new_lora_layer_outputs_exactly_its_base_layer(submission):
    base, x = _base_layer(), torch.randn(3, 8, dtype=torch.float64)
    steps = [Step("LoRALinear", (base, 4, 8.0), save_as="layer", send_back=False), Step("layer.forward", (x,))]
    out = submission.script(steps).steps[0][-1]
    # lora_B starts at zero, so the LoRA branch adds exactly nothing.
    assert_matches(out, base(x).detach(), "a new LoRALinear's output vs base_layer(x)", 1e-12, 1e-12)


def test_forward_adds_the_low_rank_product_scaled_by_alpha_over_rank(submission):
    base, x = _base_layer(), torch.randn(3, 8, dtype=torch.float64)
    a, b = torch.randn(4, 8, dtype=torch.float64), torch.randn(6, 4, dtype=torch.float64)
    steps = [
        Step("LoRALinear", (base, 4, 8.0), save_as="layer", send_back=False),
        Step("layer.load_state_dict", ({"lora_A.weight": a, "lora_B.weight": b},), {"strict": False}, send_back=False),
        Step("layer.forward", (x,)),
    ]
    out = submission.script(steps).steps[0][-1]
    expected = base(x).detach() + (8.0 / 4) * (x @ a.T) @ b.T
    assert_matches(out, expected, "forward vs base_layer(x) + (alpha / rank) x A^T B^T", 1e-12, 1e-12)


def test_merge_then_unmerge_keeps_the_outputs_and_restores_the_weight(submission):
    base, x = _base_layer(), torch.randn(3, 8, dtype=torch.float64)
    a, b = torch.randn(4, 8, dtype=torch.float64), torch.randn(6, 4, dtype=torch.float64)
    steps = [
        Step("LoRALinear", (base, 4, 8.0), save_as="layer", send_back=False),
        Step("layer.load_state_dict", ({"lora_A.weight": a, "lora_B.weight": b},), {"strict": False}, send_back=False),
        Step("layer.forward", (x,)),
        Step("layer.merge"),
        Step("layer.base_layer.weight.clone"),
        Step("layer.forward", (x,)),
        Step("layer.unmerge"),
        Step("layer.base_layer.weight.clone"),
    ]
    before, _, merged_weight, merged_out, _, restored = submission.script(steps).steps[0][2:]
    w = base.weight.detach()
    assert_matches(
        merged_weight, w + 2.0 * b @ a, "base_layer.weight after merge() vs W + scaling * B @ A", 1e-12, 1e-12
    )
    assert_matches(merged_out, before, "the merged layer's output vs the unmerged one's", 1e-12, 1e-12)
    assert_matches(restored, w, "base_layer.weight after unmerge() vs W", 1e-12, 1e-12)


def test_add_lora_on_tinygpt_trains_only_the_lora_weights_of_the_targets(submission):
    model = TinyGPT.from_seed(CONFIG, 0, torch.float64)
    ids = torch.randint(0, CONFIG.vocab_size, (2, 5), generator=torch.Generator().manual_seed(0))
    weights = torch.randn(2, 5, CONFIG.vocab_size, dtype=torch.float64)
    steps = [
        Step("add_lora", (model, 4, 8.0, ("query", "key_value")), save_as="model", send_back=False),
        Step("lora_forward_backward", (Saved("model"), ids, weights)),
    ]
    report = submission.script(steps).steps[0][-1]
    trainable = sorted(name for name, entry in report["parameters"].items() if entry["requires_grad"])
    expected = sorted(
        f"blocks.{i}.attention.{layer}.lora_{side}.weight"
        for i in range(2)
        for layer in ("query", "key_value")
        for side in "AB"
    )
    assert trainable == expected
    assert report["parameters"]["blocks.0.attention.query.lora_A.weight"]["shape"] == [4, 64]
    assert report["parameters"]["blocks.0.attention.key_value.lora_B.weight"]["shape"] == [64, 4]
    with torch.no_grad():
        assert_matches(report["output"], model(ids), "logits at initialisation vs the original model's", 1e-12, 1e-12)


def test_lora_memory_of_the_modules_tinygpt_with_rank_8_on_query_and_key_value(submission):
    counted = submission.function("lora_memory")(CONFIG, 8, ("query", "key_value"))
    # TinyGPT: embeddings (97 + 32) x 64, final norm 128, and per block 45632 (norms 256,
    # query, key_value and out 4096 each, mlp.0 64 x 256 + 256, mlp.2 256 x 64 + 64).
    # LoRA: 8 x (64 + 64) per layer, 2 layers per block, 2 blocks.
    assert counted == {
        "base_params": 99648,
        "trainable_params": 4096,
        "all_params": 103744,
        "full_bytes": 99648 * 16,  # 2 + 2 + 12 bytes per parameter
        "lora_bytes": 103744 * 2 + 4096 * 14,
    }
