# Your working copy: replace every `raise NotImplementedError` with your implementation.
# (Generated from the course's reference by `python -m grader sync`.)
"""Activation checkpointing written with autograd (lecture 02, section 6).

A plain forward through n blocks keeps every block's activations for backward. Cut the blocks
into `segments` consecutive groups; run each group without recording the graph and keep only
its input. In backward, rerun the group with the graph on, backpropagate through it, and drop
it again. Memory: segments boundaries + one segment's activations, at the cost of a second
forward; with about sqrt(n) segments both terms are O(sqrt(n)).
"""

from __future__ import annotations

import itertools

import torch
from torch import nn


def checkpointed_forward(blocks: list[nn.Module], x: torch.Tensor, segments: int) -> torch.Tensor:
    """blocks[-1](...blocks[1](blocks[0](x))), keeping only `segments` tensors for backward.

    Split the blocks into `segments` consecutive groups of (nearly) equal size: exactly
    `segments` non-empty groups, also when `segments` does not divide len(blocks) (7 blocks in
    3 segments: three groups, such as 2, 3, 2, never four groups of 7 // 3 = 2 and a rest), so
    that the forward keeps exactly `segments` inputs. Each group runs inside a
    torch.autograd.Function of your own whose forward runs the blocks under torch.no_grad() and
    saves only the group's input; its backward reruns the group with gradients on and
    backpropagates through it. The result and all gradients (of x and of every
    parameter that requires grad) must equal those of the plain forward. torch.utils.checkpoint
    is refused: write it yourself. Raises ValueError unless 1 <= segments <= len(blocks).
    """
    raise NotImplementedError("implement checkpointed_forward (lectures/02-data-parallel-and-zero.md, section 6)")


# (Write any helper functions you need here.)


def make_blocks(num_blocks: int, width: int, seed: int) -> list[nn.Module]:
    """Given: `num_blocks` blocks Linear(width, width) -> tanh, initialised from `seed`, in float64."""
    torch.manual_seed(seed)
    return [nn.Sequential(nn.Linear(width, width), nn.Tanh()).double() for _ in range(num_blocks)]


def saved_bytes_and_grads(
    num_blocks: int, width: int, seed: int, x: torch.Tensor, segments: int | None
) -> dict[str, object]:
    """Given (the grader calls it): forward (checkpointed_forward, or the plain forward when
    segments is None), then backward of y.sum().

    Counts the bytes of the tensors autograd saves for backward during the forward (through
    torch.autograd.graph.saved_tensors_hooks; each storage once, parameters excluded), and
    records the index of each block run with gradients on during the backward (the recomputed
    groups, last group first). Returns {"saved_bytes", "y", "x_grad", "grads": [gradient of each
    parameter], "recomputed": [block indices]}.
    """
    blocks = make_blocks(num_blocks, width, seed)
    recomputed: list[int] = []
    in_backward = [False]
    for index, block in enumerate(blocks):
        block.register_forward_hook(
            lambda module, args, out, index=index: (
                recomputed.append(index) if in_backward[0] and torch.is_grad_enabled() else None
            )
        )
    params = [p for block in blocks for p in block.parameters()]
    param_storages = {p.untyped_storage().data_ptr() for p in params}
    seen: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in param_storages:
            seen[storage.data_ptr()] = storage.nbytes()
        return tensor

    x = x.detach().requires_grad_(True)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        if segments is None:
            y = x
            for block in blocks:
                y = block(y)
        else:
            y = checkpointed_forward(blocks, x, segments)
    in_backward[0] = True
    y.sum().backward()
    grads = [p.grad for p in params]
    return {
        "saved_bytes": sum(seen.values()),
        "y": y.detach(),
        "x_grad": x.grad,
        "grads": grads,
        "recomputed": recomputed,
    }
