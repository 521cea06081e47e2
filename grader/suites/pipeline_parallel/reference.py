"""Trusted references of the pipeline_parallel suite, written here (never imported from a
submission): the four schedules, one process's gradients on the whole batch (torch autograd on
the unsplit model), and the brute-force partition."""

from __future__ import annotations

import itertools
import math

import torch

from grader.models.pipeline import Action, Chunk, make_layers, pipeline_loss, stage_of


def place_communication(order: list[tuple[str, int, int]], rank: int, p: int, v: int = 1) -> list[Action]:
    """RECV before and SEND after the computation each serves (what schedules.with_communication gives)."""
    last, actions = p * v - 1, []
    for kind, mb, chunk in order:
        stage = stage_of(rank, chunk, p)
        before = {"F": "RECV_F" if stage > 0 else None, "B": "RECV_B" if stage < last else None}.get(kind)
        after = {"F": "SEND_F" if stage < last else None, "B": "SEND_B" if stage > 0 else None}.get(kind)
        actions += [(k, mb, chunk) for k in (before, kind, after) if k]
    return actions


def one_f_one_b_order(p: int, m: int, rank: int) -> list[tuple[str, int, int]]:
    warmup = min(p - rank - 1, m)
    order = [("F", mb, 0) for mb in range(warmup)]
    for mb in range(warmup, m):
        order += [("F", mb, 0), ("B", mb - warmup, 0)]
    return order + [("B", mb, 0) for mb in range(m - warmup, m)]


def schedule(name: str, p: int, m: int, v: int = 1) -> list[list[Action]]:
    """The reference schedule `name` ("gpipe", "1f1b", "interleaved", "zero_bubble")."""
    orders = []
    for rank in range(p):
        if name == "gpipe":
            orders.append([("F", mb, 0) for mb in range(m)] + [("B", mb, 0) for mb in range(m)])
        elif name == "1f1b":
            orders.append(one_f_one_b_order(p, m, rank))
        elif name == "interleaved":
            orders.append(_interleaved_order(p, m, v, rank))
        else:
            orders.append(_zero_bubble_order(p, m, rank))
    return [place_communication(order, rank, p, v) for rank, order in enumerate(orders)]


def _interleaved_order(p: int, m: int, v: int, rank: int) -> list[tuple[str, int, int]]:
    size = m // max(1, m // p)  # microbatches per round, as torch's ScheduleInterleaved1F1B
    forwards = [(mb, c) for first in range(0, m, size) for c in range(v) for mb in range(first, first + size)]
    total = m * v
    warmup = min(2 * (p - rank - 1) + (v - 1) * size, total)
    order = [("F", *forwards[k]) for k in range(warmup)]
    for k in range(warmup, total):
        mb, c = forwards[k - warmup]
        order += [("F", *forwards[k]), ("B", mb, v - 1 - c)]
    return order + [("B", mb, v - 1 - c) for mb, c in forwards[total - warmup :]]


def _zero_bubble_order(p: int, m: int, rank: int) -> list[tuple[str, int, int]]:
    cap, order, pending, held, forwards_left = min(p, m), [], [], 0, m
    for kind, mb, _ in one_f_one_b_order(p, m, rank):
        if kind == "F":
            if held == cap:
                order.append(("W", pending.pop(0), 0))
                held -= 1
            order.append(("F", mb, 0))
            held, forwards_left = held + 1, forwards_left - 1
        else:
            order.append(("B", mb, 0))
            pending.append(mb)
            if forwards_left == 0:
                order.append(("W", pending.pop(0), 0))
                held -= 1
    return order + [("W", mb, 0) for mb in pending]


def one_process_grads(
    kind: str, num_layers: int, seed: int, inputs: torch.Tensor, targets: torch.Tensor
) -> dict[str, torch.Tensor]:
    """Gradients of the whole model on the whole batch (torch autograd), named as train_pipeline names them."""
    layers = make_layers(kind, num_layers, inputs.shape[-1], seed, inputs.dtype)
    pipeline_loss(Chunk(layers)(inputs), targets, inputs.shape[0]).backward()
    return {f"layers.{i}.{name}": p.grad for i, layer in enumerate(layers) for name, p in layer.named_parameters()}


def microbatch_grads(
    kind: str, num_layers: int, seed: int, inputs: torch.Tensor, targets: torch.Tensor, m: int
) -> list[dict[str, torch.Tensor]]:
    """Per microbatch (the batch cut as train_pipeline cuts it), the weight gradients of its
    loss alone (its share of the whole batch's summed loss), named as train_pipeline names them."""
    batch, grads = inputs.shape[0], []
    for x, y in zip(inputs.tensor_split(m), targets.tensor_split(m)):
        layers = make_layers(kind, num_layers, inputs.shape[-1], seed, inputs.dtype)
        pipeline_loss(Chunk(layers)(x), y, batch).backward()
        grads.append(
            {f"layers.{i}.{name}": p.grad for i, layer in enumerate(layers) for name, p in layer.named_parameters()}
        )
    return grads


def best_bottleneck(costs: list[float], p: int) -> float:
    """The smallest largest-stage cost over every way to cut `costs` into p contiguous non-empty stages."""
    n, best = len(costs), math.inf
    for cuts in itertools.combinations(range(1, n), p - 1):
        bounds = (0, *cuts, n)
        best = min(best, max(math.fsum(costs[a:b]) for a, b in itertools.pairwise(bounds)))
    return best


def torch_interleaved_order(p: int, m: int, v: int) -> list[list[tuple[str, int, int]]]:
    """Each rank's F and B actions, (kind, microbatch, chunk), in the order of
    torch.distributed.pipelining's ScheduleInterleaved1F1B (its idle steps left out). The
    per-rank order is computed without a process group: the schedule's own method, on an
    object holding just the sizes it reads."""
    from types import SimpleNamespace

    from torch.distributed.pipelining.schedules import ScheduleInterleaved1F1B

    rounds = max(1, m // p)
    kinds = {"FORWARD": "F", "FULL_BACKWARD": "B"}
    orders = []
    for rank in range(p):
        sizes = SimpleNamespace(
            n_local_stages=v, microbatches_per_round=m // rounds, pp_group_size=p, _n_microbatches=m
        )
        actions = ScheduleInterleaved1F1B._calculate_single_rank_operations(sizes, rank)
        orders.append([(kinds[a.computation_type.name], a.microbatch_index, a.stage_index // p) for a in actions if a])
    return orders
