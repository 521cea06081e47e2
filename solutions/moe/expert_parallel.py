"""Expert parallelism: the experts of one layer split across ranks (lecture 04, section 6).

The experts are split over the ranks of an expert-parallel process group (`group`; None: the
default group, the whole world). With p = the size of the group and E experts (E divisible by
p), group rank r (dist.get_rank(group)) owns the experts r*E/p ... (r+1)*E/p - 1. Every rank
holds the whole router and the shared experts, and its own batch of tokens. Every function
takes `group` because in a real run expert parallelism lives inside a larger mesh (e.g. each
data-parallel replica, or each pipeline stage, shards its MoE layers over its own few ranks),
so several expert-parallel groups exchange tokens at once, each only within itself. A forward pass is:

    route locally -> all-to-all: send each choice's token to the rank owning its expert
    -> the owner runs its experts -> all-to-all back -> weight and sum at the token's rank

Only dropless layers (capacity_factor=None) are sharded here: the output of a token then
depends on that token alone, so p ranks give exactly what one process gives on all tokens.
"""

from __future__ import annotations

import copy

import torch
import torch.distributed as dist
from layer import MoELayer, swiglu_experts
from routing import combine, dispatch, topk_route
from torch import nn


def shard_experts(layer: MoELayer, group: dist.ProcessGroup | None = None) -> MoELayer:
    """Given: a copy of `layer` that keeps only this rank's routed experts, this rank being
    group rank dist.get_rank(group) of p = dist.get_world_size(group) (None: the world).

    The copy's w_gate, w_up and w_down hold experts first_expert ... first_expert + E/p - 1
    (new parameters: gradients stay on the owning rank); `first_expert` and
    `num_local_experts` are set on it; the router and shared experts are copied whole.
    """
    rank, world_size = dist.get_rank(group), dist.get_world_size(group)
    if layer.num_experts % world_size:
        raise ValueError(f"{layer.num_experts} experts cannot be split evenly over {world_size} ranks")
    if layer.capacity_factor is not None:
        raise ValueError("expert parallelism here is dropless: build the layer with capacity_factor=None")
    shard = copy.deepcopy(layer)
    shard.num_local_experts = layer.num_experts // world_size
    shard.first_expert = rank * shard.num_local_experts
    local = slice(shard.first_expert, shard.first_expert + shard.num_local_experts)
    for name in ("w_gate", "w_up", "w_down"):
        setattr(shard, name, nn.Parameter(getattr(layer, name).detach()[local].clone()))
    return shard


### BEGIN SOLUTION
class _AllToAll(torch.autograd.Function):
    """dist.all_to_all_single with autograd: the gradient goes back the way the data came,
    with the send and receive sizes swapped."""

    @staticmethod
    def forward(ctx, rows, send_sizes, receive_sizes, group):
        ctx.sizes, ctx.group = (send_sizes, receive_sizes), group
        received = rows.new_empty(sum(receive_sizes), rows.shape[-1])
        dist.all_to_all_single(received, rows.contiguous(), receive_sizes, send_sizes, group=group)
        return received

    @staticmethod
    def backward(ctx, grad_received):
        send_sizes, receive_sizes = ctx.sizes
        grad_rows = grad_received.new_empty(sum(send_sizes), grad_received.shape[-1])
        dist.all_to_all_single(grad_rows, grad_received.contiguous(), send_sizes, receive_sizes, group=ctx.group)
        return grad_rows, None, None, None


def _exchange_counts(counts: torch.Tensor, group: dist.ProcessGroup | None) -> torch.Tensor:
    """counts (p, L): choices this rank sends to each rank's L local experts. Returns (p, L):
    choices each rank sends to this rank's experts."""
    received = torch.empty_like(counts)
    dist.all_to_all_single(received, counts, group=group)
    return received


### END SOLUTION


def expert_parallel_forward(
    layer_shard: MoELayer, x: torch.Tensor, group: dist.ProcessGroup | None = None
) -> torch.Tensor:
    """The output of the whole (dropless) MoE layer for this rank's tokens x (..., d_model).

    layer_shard comes from shard_experts(layer, group) with the same `group` (None: the world):
    p is the size of `group`, "rank r" its group rank, and every exchange is
    dist.all_to_all_single(..., group=group), whose split lists are indexed by group rank.
    Build the exchange yourself on dist.all_to_all_single with uneven split sizes (it has no autograd: wrap it in a
    torch.autograd.Function whose backward runs the reverse exchange):

    1. route x with the router (topk_route); order the T*k choices by expert, so that the
       choices for rank 0's experts come first, then rank 1's, ...
    2. exchange how many choices go to each (rank, local expert), then the token rows: a
       rank sends only the rows of choices whose expert lives elsewhere, each row once per
       such choice, and keeps its local ones (the all-to-all copies a rank's own split
       without the network);
    3. run the local experts on what arrived (swiglu_experts over buffers, as MoELayer does);
    4. send the outputs back with the reverse exchange, weight them and sum per token, and add
       the shared experts.

    Returns y with x's shape. Gradients flow to x, the router, the local experts and the shared
    experts, as they would in MoELayer on all ranks' tokens together.
    """
    ### BEGIN SOLUTION
    world_size = dist.get_world_size(group)
    local, d_model = layer_shard.num_local_experts, layer_shard.d_model
    tokens = x.reshape(-1, d_model)
    weights, expert_ids = topk_route(layer_shard.router(tokens), layer_shard.k)

    # 1. Choices sorted by expert: experts are numbered rank by rank, so this also groups them
    #    by destination rank. counts[r, l] = choices for local expert l of rank r.
    flat_ids = expert_ids.reshape(-1)
    order = torch.argsort(flat_ids, stable=True)
    counts = torch.bincount(flat_ids, minlength=layer_shard.num_experts).view(world_size, local)

    # 2. Sizes, then rows, to the owners.
    incoming = _exchange_counts(counts, group)  # (source rank, local expert)
    send_sizes, receive_sizes = counts.sum(dim=1).tolist(), incoming.sum(dim=1).tolist()
    rows = tokens[order // layer_shard.k]
    received = _AllToAll.apply(rows, send_sizes, receive_sizes, group)

    # 3. Each arrived row's local expert, from the counts: rows come grouped by source rank,
    #    and within a source by local expert. Run them through buffers as MoELayer does.
    received_ids = torch.repeat_interleave(torch.arange(local).repeat(world_size), incoming.reshape(-1))
    received_ids = received_ids.unsqueeze(1)
    capacity = int(incoming.sum(dim=0).max()) if received_ids.numel() else 0
    expert_inputs, slots = dispatch(received, received_ids, local, capacity)
    expert_outputs = swiglu_experts(expert_inputs, layer_shard.w_gate, layer_shard.w_up, layer_shard.w_down)
    outputs = combine(expert_outputs, received_ids, torch.ones_like(slots, dtype=received.dtype), slots)

    # 4. Back to the tokens' rank, in the order they were sent; weight and sum per token.
    returned = _AllToAll.apply(outputs, receive_sizes, send_sizes, group)
    y = torch.zeros_like(tokens).index_add(0, order // layer_shard.k, returned * weights.reshape(-1, 1)[order])
    if layer_shard.num_shared_experts > 0:
        y = y + layer_shard.shared_experts(tokens)
    return y.view_as(x)
    ### END SOLUTION


def expert_parallel_forward_backward(
    layer_shard: MoELayer, x: torch.Tensor, grad_output: torch.Tensor, group: dist.ProcessGroup | None = None
) -> dict[str, object]:
    """Given (the grader calls it): expert_parallel_forward (over `group`), then backward of
    sum(y * grad_output).

    Returns {"y": y, "x_grad": dL/dx, "grads": {parameter name: dL/dparameter on this rank}}.
    """
    layer_shard.zero_grad(set_to_none=True)
    x = x.detach().requires_grad_(True)
    y = expert_parallel_forward(layer_shard, x, group)
    (y * grad_output).sum().backward()
    grads = {name: p.grad if p.grad is not None else torch.zeros_like(p) for name, p in layer_shard.named_parameters()}
    return {"y": y.detach(), "x_grad": x.grad, "grads": grads}
