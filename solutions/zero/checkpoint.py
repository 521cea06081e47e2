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
    ### BEGIN SOLUTION
    if not 1 <= segments <= len(blocks):
        raise ValueError(f"segments must be between 1 and {len(blocks)}, not {segments}")
    for start, end in _split(len(blocks), segments):
        group = blocks[start:end]
        params = [p for block in group for p in block.parameters() if p.requires_grad]
        x = _CheckpointedSegment.apply(x, group, *params)
    return x
    ### END SOLUTION


### BEGIN SOLUTION
class _CheckpointedSegment(torch.autograd.Function):
    """y = blocks(x), saving only x; backward reruns blocks with the graph on."""

    @staticmethod
    def forward(ctx, x, blocks, *params):
        ctx.blocks = blocks
        ctx.save_for_backward(x)
        with torch.no_grad():
            for block in blocks:
                x = block(x)
        return x

    @staticmethod
    def backward(ctx, grad_y):
        (x,) = ctx.saved_tensors
        params = [p for block in ctx.blocks for p in block.parameters() if p.requires_grad]
        x = x.detach().requires_grad_(x.requires_grad)
        with torch.enable_grad():
            y = x
            for block in ctx.blocks:
                y = block(y)
        inputs = ([x] if x.requires_grad else []) + params
        grads = list(torch.autograd.grad(y, inputs, grad_y, allow_unused=True))
        grad_x = grads.pop(0) if x.requires_grad else None
        return (grad_x, None, *grads)


def _split(n: int, segments: int) -> list[tuple[int, int]]:
    """[start, end) of `segments` consecutive groups of n blocks, sizes differing by at most one."""
    bounds = [round(i * n / segments) for i in range(segments + 1)]
    return list(itertools.pairwise(bounds))


### END SOLUTION


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
