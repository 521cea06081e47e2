"""Module post_training, part A: the reference LoRA against PEFT 0.21.2 (huggingface/peft,
peft.tuners.lora), on the same weights in float64.

- LoRALinear against PEFT's LoRA Linear layer (peft.tuners.lora.layer.Linear) around the same
  nn.Linear, with the same lora_A and lora_B weights copied in, the same r and lora_alpha and
  lora_dropout=0: the forward, the gradients of A and B, and the merged weight (PEFT's merge());
- add_lora's trainable parameters and lora_memory's counts against PEFT's
  get_peft_model(TinyGPT, LoraConfig(...)).get_nb_trainable_parameters() on the same targets;
- the lecture's worked numbers (a Llama-3-8B-shaped model, r = 16 on q, k, v, o).

The hidden suite cannot import PEFT (students grade without it); this file is where the
reference is tied to the library.
"""

from __future__ import annotations

import copy

import pytest
import torch
from conftest import load_solution
from torch import nn

from grader.models.tiny_gpt import TinyGPT, TinyGPTConfig

peft = pytest.importorskip("peft")
from peft import LoraConfig, get_peft_model  # noqa: E402
from peft.tuners.lora.layer import Linear as PeftLoraLinear  # noqa: E402

LORA = load_solution("post_training", "lora.py")


def _same_layers(in_features: int, out_features: int, rank: int, alpha: float, bias: bool, seed: int):
    """The reference LoRALinear and PEFT 0.21.2's LoRA Linear around copies of one float64
    nn.Linear, with the same random (nonzero) A and B in both."""
    torch.manual_seed(seed)
    base = nn.Linear(in_features, out_features, bias=bias).double()
    ours = LORA.LoRALinear(copy.deepcopy(base), rank, alpha)
    config = LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=0.0)
    theirs = PeftLoraLinear(copy.deepcopy(base), "default", config=config, r=rank, lora_alpha=alpha)
    theirs.base_layer.requires_grad_(False)  # PEFT freezes the base in its model wrapper, not in the layer
    a = torch.randn(rank, in_features, dtype=torch.float64)
    b = torch.randn(out_features, rank, dtype=torch.float64)
    with torch.no_grad():
        for layer_a, layer_b in ((ours.lora_A, ours.lora_B), (theirs.lora_A["default"], theirs.lora_B["default"])):
            layer_a.weight.copy_(a)
            layer_b.weight.copy_(b)
    return ours, theirs


@pytest.mark.parametrize(
    ("in_features", "out_features", "rank", "alpha", "bias"),
    [(24, 40, 4, 8.0, True), (7, 5, 1, 3.0, False), (64, 48, 16, 16.0, True)],
    ids=["24x40-r4", "7x5-r1-no-bias", "64x48-r16"],
)
def test_lora_linear_equals_pefts_lora_layer_forward_gradients_and_merge(in_features, out_features, rank, alpha, bias):
    """PEFT 0.21.2's peft.tuners.lora.layer.Linear: forward, the gradients of lora_A and
    lora_B, the scaling, and the merged base weight, all in float64 to 1e-12."""
    ours, theirs = _same_layers(in_features, out_features, rank, alpha, bias, seed=rank)
    assert ours.scaling == theirs.scaling["default"]
    x = torch.randn(3, 5, in_features, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    weights = torch.randn(3, 5, out_features, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    out_ours, out_theirs = ours(x), theirs(x)
    torch.testing.assert_close(out_ours, out_theirs, rtol=1e-12, atol=1e-12)
    (out_ours * weights).sum().backward()
    (out_theirs * weights).sum().backward()
    for side in ("A", "B"):
        got = getattr(ours, f"lora_{side}").weight.grad
        expected = getattr(theirs, f"lora_{side}")["default"].weight.grad
        torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12, msg=f"grad of lora_{side}")
    assert ours.base_layer.weight.grad is None and theirs.base_layer.weight.grad is None
    # Trainable parameters: the same count as PEFT's layer (lora_A and lora_B only).
    count = sum(p.numel() for p in ours.parameters() if p.requires_grad)
    assert (
        count == sum(p.numel() for p in theirs.parameters() if p.requires_grad) == rank * (in_features + out_features)
    )
    with torch.no_grad():
        ours.merge()
        theirs.merge()
        torch.testing.assert_close(ours.base_layer.weight, theirs.base_layer.weight, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(ours(x), theirs(x), rtol=1e-12, atol=1e-12)
        ours.unmerge()
        theirs.unmerge()
        torch.testing.assert_close(ours.base_layer.weight, theirs.base_layer.weight, rtol=1e-12, atol=1e-12)


def test_lora_linear_initialises_as_pefts_layer():
    """PEFT 0.21.2's default init (init_lora_weights=True): A by kaiming_uniform_(a=sqrt(5)) from
    the global generator, B zero. Seeded alike, the reference draws the same A."""
    base = nn.Linear(33, 17)
    torch.manual_seed(5)
    ours = LORA.LoRALinear(copy.deepcopy(base), 6, 12.0)
    torch.manual_seed(5)
    theirs = PeftLoraLinear(copy.deepcopy(base), "default", config=LoraConfig(r=6, lora_alpha=12), r=6, lora_alpha=12)
    torch.testing.assert_close(ours.lora_A.weight, theirs.lora_A["default"].weight, rtol=0, atol=0)
    assert not ours.lora_B.weight.any() and not theirs.lora_B["default"].weight.any()


TINY_TARGETS = [
    TinyGPTConfig(max_seq_len=32),
    TinyGPTConfig(max_seq_len=20, num_layers=3, d_model=48, num_heads=6, num_kv_heads=3, mlp_ratio=3),
]


@pytest.mark.parametrize("config", TINY_TARGETS, ids=["module-config", "3-layers-48"])
@pytest.mark.parametrize(
    ("rank", "targets"),
    [(4, ("query", "key_value")), (1, ("attention.out", "mlp.0", "mlp.2")), (3, ("blocks.1.mlp.0", "query"))],
    ids=["qkv-r4", "out-mlp-r1", "one-block-r3"],
)
def test_add_lora_and_lora_memory_count_what_peft_counts(config, rank, targets):
    """get_peft_model(model, LoraConfig(r, lora_alpha, target_modules)).get_nb_trainable_parameters()
    (PEFT 0.21.2) against the reference add_lora's trainable parameters and lora_memory's
    (trainable_params, all_params). Targets that match a non-Linear module (such as "0", which
    matches the Block blocks.0) are left out: PEFT refuses them."""
    model = TinyGPT.from_seed(config, 0)
    peft_model = get_peft_model(
        copy.deepcopy(model), LoraConfig(r=rank, lora_alpha=2 * rank, target_modules=list(targets))
    )
    trainable, everything = peft_model.get_nb_trainable_parameters()
    ours = LORA.add_lora(copy.deepcopy(model), rank, 2.0 * rank, targets)
    assert sum(p.numel() for p in ours.parameters() if p.requires_grad) == trainable
    assert sum(p.numel() for p in ours.parameters()) == everything
    counted = LORA.lora_memory(config, rank, targets)
    assert (counted["trainable_params"], counted["all_params"]) == (trainable, everything)
    assert counted["base_params"] == sum(p.numel() for p in model.parameters())
    # The same layers are adapted, under PEFT's names with the adapter's name taken out.
    names = {n.replace(".default", "") for n, p in peft_model.base_model.model.named_parameters() if p.requires_grad}
    assert names == {n for n, p in ours.named_parameters() if p.requires_grad}


def test_the_lectures_llama_3_8b_numbers():
    """Section 2's worked example: a Llama-3-8B shape (d 4096, 32 layers, 32 query and 8 key/value
    heads of 128, SwiGLU of 14336, vocabulary 128256, untied head), LoRA r = 16 on q, k, v, o."""
    d, layers, kv, ffn, vocab = 4096, 32, 1024, 14336, 128256
    per_layer = 2 * d * d + 2 * d * kv + 3 * d * ffn + 2 * d
    base = layers * per_layer + 2 * vocab * d + d
    trainable = layers * 16 * ((d + d) + 2 * (d + kv) + (d + d))
    assert (base, trainable) == (8_030_261_248, 13_631_488)
    assert base * 16 == 128_484_179_968
    assert (base + trainable) * 2 + trainable * 14 == 16_278_626_304
