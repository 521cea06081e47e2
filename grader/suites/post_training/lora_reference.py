"""What the LoRA suite compares against, written here (the suite never imports the solutions):
a TinyGPT built on the meta device (shapes only, no memory, so a model of billions of parameters
costs nothing) and wrapped the way add_lora's docstring says, then counted."""

from __future__ import annotations

import torch
from torch import nn

from grader.models.tiny_gpt import TinyGPT, TinyGPTConfig


class _Wrapped(nn.Module):
    """Shapes of a LoRA layer: the frozen base_layer, lora_A (rank x in), lora_B (out x rank)."""

    def __init__(self, base_layer: nn.Linear, rank: int) -> None:
        super().__init__()
        self.base_layer = base_layer
        device, dtype = base_layer.weight.device, base_layer.weight.dtype
        self.lora_A = nn.Linear(base_layer.in_features, rank, bias=False, device=device, dtype=dtype)
        self.lora_B = nn.Linear(rank, base_layer.out_features, bias=False, device=device, dtype=dtype)


def targeted(model: nn.Module, target_modules: tuple[str, ...]) -> list[str]:
    """The nn.Linear names of `model` equal to a target or ending with "." + a target."""
    return [
        name
        for name, module in model.named_modules()
        if isinstance(module, nn.Linear) and any(name == t or name.endswith("." + t) for t in target_modules)
    ]


def wrap(model: nn.Module, rank: int, target_modules: tuple[str, ...]) -> nn.Module:
    """`model` with its targeted nn.Linear wrapped, only lora_A and lora_B trainable."""
    names = targeted(model, target_modules)
    for name in names:
        parent, _, child = name.rpartition(".")
        owner = model.get_submodule(parent)
        setattr(owner, child, _Wrapped(getattr(owner, child), rank))
    trainable = {f"{name}.lora_{side}.weight" for name in names for side in "AB"}
    for name, parameter in model.named_parameters():
        parameter.requires_grad_(name in trainable)
    return model


def parameter_table(model: nn.Module) -> dict[str, tuple[list[int], bool]]:
    """name -> (shape, requires_grad) of every parameter."""
    return {name: (list(p.shape), p.requires_grad) for name, p in model.named_parameters()}


def memory(
    config: TinyGPTConfig,
    rank: int,
    target_modules: tuple[str, ...],
    bytes_per_param: int = 2,
    optimizer_bytes: int = 12,
) -> dict[str, int]:
    """lora_memory's dict, counted on a TinyGPT(config) built on the meta device and wrapped."""
    with torch.device("meta"):
        model = TinyGPT(config)
        base = sum(p.numel() for p in model.parameters())
        wrapped = wrap(model, rank, target_modules)
    trainable = sum(p.numel() for p in wrapped.parameters() if p.requires_grad)
    everything = sum(p.numel() for p in wrapped.parameters())
    return {
        "base_params": base,
        "trainable_params": trainable,
        "all_params": everything,
        "full_bytes": base * (2 * bytes_per_param + optimizer_bytes),
        "lora_bytes": everything * bytes_per_param + trainable * (bytes_per_param + optimizer_bytes),
    }
