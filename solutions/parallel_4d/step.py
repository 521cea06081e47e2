"""One training step on the 4D grid: 1F1B over the pipeline, gradients summed over dp x cp and
the tied embedding, then the update (lecture 12-4d-parallelism, section 5).

`tokens` (B, S + 1) is the whole global batch, the same on every rank: sequence j predicts
tokens[j, 1:] from tokens[j, :-1]. The loss is the mean cross-entropy over all B * S predicted
tokens, exactly what one process training the whole TinyGPT on the whole batch computes.

A rank at coordinates (t, c, d, s) trains on
- the rows [d*B/dp, (d+1)*B/dp) of the batch (its data-parallel share), cut along the batch into
  `microbatches` equal micro-batches, taken in order;
- positions [c*S/cp, (c+1)*S/cp) of their inputs and targets (its context-parallel share).
"""

from __future__ import annotations

import warnings

import torch
import torch.distributed as dist
from grid import RankGrid, build_groups, rank_grid
from model import parallelize, vocab_parallel_cross_entropy
from torch import nn

from grader.models.tiny_gpt import TinyGPT, TinyGPTConfig


def train_step(
    stage: nn.Module,
    tokens: torch.Tensor,
    grid: RankGrid,
    rank: int,
    groups: dict[str, dist.ProcessGroup],
    microbatches: int,
    lr: float,
) -> float | None:
    """One step of SGD (every parameter p -= lr * p.grad, no momentum) on this rank's `stage`
    (parallelize's module), run by every rank of the grid at once. Returns the step's loss
    (float, the mean over the whole global batch, before the update) on the ranks of the last
    stage, None on the others.

    Schedule: 1F1B within the rank's "pp" group (Megatron's non-interleaved schedule) over m =
    `microbatches` micro-batches, each B / (dp * m) rows of the rank's share (module docstring):
    stage s of pp runs min(pp - s - 1, m) warm-up forwards, then alternates one forward and one
    backward, then the remaining backwards, micro-batches in order; so at most pp - s micro-batches
    have run their forward and not yet their backward (min(pp - s, m) at the busiest moment), and
    each stage sends one message per micro-batch to each neighbour. Stage s receives its inputs from the rank of
    stage s - 1 and sends its outputs to stage s + 1 of its "pp" group (point to point, global
    ranks), and the gradients of those outputs come back the same way.

    Each micro-batch's loss is the sum of its tokens' cross-entropies (vocab_parallel_cross_entropy
    over the "tp" group) divided by B * S, so that the gradients summed over the "dp-cp" group
    (dist.all_reduce, SUM) are those of the whole batch's mean. With pp > 1 the first and last
    stages also sum the token embedding's gradient over their "embedding" group before the
    update: the tied weights stay equal. The loss returned is summed over the last stage's
    "dp-cp" group.

    Raises ValueError unless dp * microbatches divides B and cp divides S.
    """
    ### BEGIN SOLUTION
    batch, length = tokens.shape[0], tokens.shape[1] - 1
    dp, cp, pp = grid.sizes["dp"], grid.sizes["cp"], grid.sizes["pp"]
    if batch % (dp * microbatches):
        raise ValueError(f"train_step: dp * microbatches = {dp * microbatches} must divide the batch of {batch}")
    if length % cp:
        raise ValueError(f"train_step: cp = {cp} must divide the sequence length {length}")
    d, c, s = grid.coordinate("dp", rank), grid.coordinate("cp", rank), grid.coordinate("pp", rank)
    rows = tokens[d * batch // dp : (d + 1) * batch // dp]
    window = slice(c * length // cp, (c + 1) * length // cp)
    inputs, targets = rows[:, :-1][:, window], rows[:, 1:][:, window]
    pipeline = _Pipeline(stage, grid.members("pp", rank), s, groups["tp"], batch * length)
    _one_f_one_b(pipeline, inputs.chunk(microbatches), targets.chunk(microbatches), pp - s - 1)
    _sum_gradients(stage, groups, tied=pp > 1 and (pipeline.first or pipeline.last))
    with torch.no_grad():
        for p in stage.parameters():
            p -= lr * p.grad
    return _global_loss(pipeline, groups)


def _one_f_one_b(pipeline: _Pipeline, inputs: tuple, targets: tuple, warmup: int) -> None:
    """Warm-up forwards, then one forward and one backward at a time, then the last backwards."""
    m = len(inputs)
    warmup = min(warmup, m)
    for i in range(warmup):
        pipeline.forward(i, inputs[i], targets[i])
    for i in range(m - warmup):
        pipeline.forward(warmup + i, inputs[warmup + i], targets[warmup + i])
        pipeline.backward(i)
    for i in range(m - warmup, m):
        pipeline.backward(i)
    pipeline.finish()


def _sum_gradients(stage: nn.Module, groups: dict[str, dist.ProcessGroup], tied: bool) -> None:
    """The tied embedding's gradient over the "embedding" group, then every gradient over "dp-cp"."""
    if tied:
        dist.all_reduce(stage.token_embedding.weight.grad, group=groups["embedding"])
    _all_reduce_flat([p.grad for p in stage.parameters()], groups["dp-cp"])


def _global_loss(pipeline: _Pipeline, groups: dict[str, dist.ProcessGroup]) -> float | None:
    """The whole batch's loss on the last stage (its micro-batch losses summed over the "dp-cp"
    group); None on the other stages."""
    if not pipeline.last:
        return None
    loss = torch.stack(pipeline.losses).sum().reshape(1)
    dist.all_reduce(loss, group=groups["dp-cp"])
    return loss.item()


def _all_reduce_flat(grads: list[torch.Tensor], group: dist.ProcessGroup) -> None:
    """One all-reduce of every gradient, flattened into one bucket (one message, not one each)."""
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat, group=group)
    offset = 0
    for g in grads:
        g.copy_(flat[offset : offset + g.numel()].view_as(g))
        offset += g.numel()


class _Pipeline:
    """The micro-batches of one stage in flight: what forward stashed for its backward."""

    def __init__(self, stage: nn.Module, stages: list[int], s: int, tp_group, tokens: int) -> None:
        self.stage, self.stages, self.s, self.tp_group, self.tokens = stage, stages, s, tp_group, tokens
        self.first, self.last = s == 0, s == len(stages) - 1
        self.stash: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self.losses: list[torch.Tensor] = []
        self.sends: list[dist.Work] = []

    def forward(self, i: int, ids: torch.Tensor, targets: torch.Tensor) -> None:
        if self.first:
            x = ids
        else:  # the previous stage's output: (b, S/cp, d_model), the model's dtype
            dtype = next(self.stage.parameters()).dtype
            x = torch.empty(*ids.shape, self.stage.config.d_model, dtype=dtype)
            dist.recv(x, self.stages[self.s - 1], tag=2 * i)
            x.requires_grad_(True)
        out = self.stage(x)
        if self.last:
            loss = vocab_parallel_cross_entropy(out, targets, self.stage.vocab_start, self.tp_group).sum()
            out = loss / self.tokens
            self.losses.append(out.detach())
        else:
            self.sends.append(dist.isend(out.detach().contiguous(), self.stages[self.s + 1], tag=2 * i))
        self.stash[i] = (x, out)

    def backward(self, i: int) -> None:
        x, out = self.stash.pop(i)
        if self.last:
            out.backward()
        else:
            grad = torch.empty_like(out)
            dist.recv(grad, self.stages[self.s + 1], tag=2 * i + 1)
            out.backward(grad)
        if not self.first:
            self.sends.append(dist.isend(x.grad.contiguous(), self.stages[self.s - 1], tag=2 * i + 1))

    def finish(self) -> None:
        for work in self.sends:
            work.wait()

    ### END SOLUTION


class InFlight:
    """Counts, on one stage module, the micro-batches whose forward ran and whose backward has
    not started yet (forward hooks and full backward pre-hooks); `peak` is the largest count."""

    def __init__(self, stage: nn.Module) -> None:
        self.now = self.peak = 0
        stage.register_forward_hook(self._forward)
        stage.register_full_backward_pre_hook(self._backward)

    def _forward(self, module, inputs, output) -> None:
        self.now += 1
        self.peak = max(self.peak, self.now)

    def _backward(self, module, grad_output) -> None:
        self.now -= 1


def step_4d(
    config: TinyGPTConfig,
    sizes: dict[str, int],
    order: str,
    tokens: torch.Tensor,
    microbatches: int,
    lr: float,
    seed: int,
) -> dict:
    """Given (the grader and the notebook call it on every rank of the world): TinyGPT from
    `seed` in float64, this rank's grid, groups and stage, then one train_step. Returns "loss",
    "state" (the stage's state_dict after the step), "groups" (this rank's members of each
    kind) and "in_flight" (the most micro-batches the stage held between forward and backward)."""
    rank = dist.get_rank()
    grid = rank_grid(dist.get_world_size(), order=order, **sizes)
    groups = build_groups(grid, rank)
    model = TinyGPT.from_seed(config, seed, torch.float64)
    stage = parallelize(model, grid, rank, groups)
    in_flight = InFlight(stage)
    with warnings.catch_warnings():  # the first stage's inputs are ids: torch notes the hooks see none
        warnings.filterwarnings("ignore", message="Full backward hook is firing")
        loss = train_step(stage, tokens, grid, rank, groups, microbatches, lr)
    state = {name: value.detach().clone() for name, value in stage.state_dict().items()}
    members = {kind: grid.members(kind, rank) for kind in grid.groups}
    return {"loss": loss, "state": state, "groups": members, "in_flight": in_flight.peak}
