"""ZeRO stages 1 and 2: the optimizer state, and then the gradients, split over the ranks
(lecture 02, section 4).

Each rank owns a shard of the parameters and builds the real optimizer over that shard only,
so Adam's two state tensors per parameter exist once in the world instead of once per rank:

    stage 1: all-reduce (average) every gradient; each rank steps its own shard;
             every parameter is then broadcast from its owner (an all-gather of the shards)
    stage 2: reduce each gradient to its owner only (a reduce-scatter): the other ranks drop it,
             so gradients are sharded too; then the same step and gather as stage 1
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
import torch.distributed as dist
from ddp import MLP
from torch import nn


def partition_by_bytes(sizes: list[int], world_size: int) -> list[int]:
    """Given: the owner rank of each of `sizes` (bytes), balancing bytes per rank: the largest
    tensors first, each to the rank holding the fewest bytes so far (ties: the lowest rank)."""
    owners, loads = [0] * len(sizes), [0] * world_size
    for i in sorted(range(len(sizes)), key=lambda i: -sizes[i]):
        rank = loads.index(min(loads))
        owners[i] = rank
        loads[rank] += sizes[i]
    return owners


class ShardedOptimizer:
    """ZeRO-sharded `optimizer_cls` over `params`, across the ranks of `group` (None: the
    default group, the whole world): the data-parallel group, the ranks that hold the same
    model shard. p is the size of `group`, owners are ranks within it, and every collective
    takes group=group (a rank number given to dist.reduce or dist.broadcast is a global rank:
    name the owner with group_dst=owner / group_src=owner instead).

    Construction: the parameters are split over the p ranks of the group with partition_by_bytes
    (sizes in bytes); this rank (dist.get_rank(group)) keeps
    `self.optimizer = optimizer_cls(its own parameters, **kwargs)` (the grader reads its .state
    to count bytes), and nothing for the others' parameters.

    step(): every rank has run backward on its own slice of the batch. Average the gradients
    over the group (stage 1: dist.all_reduce then divide by p; stage 2: dist.reduce to the
    owner only, after which the ranks that do not own a parameter set its .grad to None),
    step self.optimizer, then broadcast each parameter from its owner so all ranks hold the
    updated model. zero_grad() sets every .grad to None. A parameter whose .grad is None on
    every rank is skipped (all ranks hold the same model, so they agree on which).
    Raises ValueError for a stage other than 1 or 2.
    """

    def __init__(
        self,
        params: Iterable[nn.Parameter],
        optimizer_cls: type,
        stage: int = 1,
        group: dist.ProcessGroup | None = None,
        **kwargs,
    ) -> None:
        self.group = group
        ### BEGIN SOLUTION
        if stage not in (1, 2):
            raise ValueError(f"stage must be 1 or 2, not {stage}")
        self.params, self.stage = list(params), stage
        self.rank, self.world_size = dist.get_rank(group), dist.get_world_size(group)
        sizes = [p.numel() * p.element_size() for p in self.params]
        self.owners = partition_by_bytes(sizes, self.world_size)
        mine = [p for p, owner in zip(self.params, self.owners) if owner == self.rank]
        self.optimizer = optimizer_cls(mine, **kwargs)
        ### END SOLUTION

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        ### BEGIN SOLUTION
        for p, owner in zip(self.params, self.owners):
            if p.grad is None:
                continue
            if self.stage == 1:
                dist.all_reduce(p.grad, group=self.group)
            else:
                dist.reduce(p.grad, group=self.group, group_dst=owner)
            if self.stage == 1 or owner == self.rank:
                p.grad /= self.world_size
            else:
                p.grad = None  # stage 2: only the owner keeps the summed gradient
        self.optimizer.step()
        for p, owner in zip(self.params, self.owners):
            dist.broadcast(p.data, group=self.group, group_src=owner)
        ### END SOLUTION


def state_bytes(optimizer: torch.optim.Optimizer) -> int:
    """Given: bytes of every tensor in optimizer.state (numel * element_size)."""
    return sum(
        value.numel() * value.element_size()
        for state in optimizer.state.values()
        for value in state.values()
        if isinstance(value, torch.Tensor)
    )


def train_sharded(
    state: dict[str, torch.Tensor],
    optimizer: str,
    stage: int,
    lr: float,
    inputs: torch.Tensor,
    targets: torch.Tensor,
    group: dist.ProcessGroup | None = None,
) -> dict[str, object]:
    """Given (the grader calls it on every rank): the MLP of ddp.py ("plain") loaded from
    `state`, trained one ShardedOptimizer step (over `group`; None: the world) per batch (this
    rank's slices) on the mean squared error; optimizer "sgd" (momentum 0.9) or "adamw" (weight decay 0.01).

    Returns the final parameters, "state_bytes" (this rank's inner optimizer state after the
    last step), "grad_bytes" (bytes of the .grad tensors this rank holds after the last step)
    and "grads" (each parameter's .grad after the last step, by name; None where it has none).
    """
    model = MLP("plain", inputs.shape[-1]).to(inputs.dtype)
    model.load_state_dict(state)
    if optimizer == "sgd":
        opt = ShardedOptimizer(model.parameters(), torch.optim.SGD, stage, group=group, lr=lr, momentum=0.9)
    else:
        opt = ShardedOptimizer(model.parameters(), torch.optim.AdamW, stage, group=group, lr=lr, weight_decay=0.01)
    for x, y in zip(inputs, targets):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    return {
        "state": {k: v.detach().clone() for k, v in model.state_dict().items()},
        "state_bytes": state_bytes(opt.optimizer),
        "grad_bytes": sum(g.numel() * g.element_size() for g in grads),
        "grads": {name: None if p.grad is None else p.grad.clone() for name, p in model.named_parameters()},
    }
