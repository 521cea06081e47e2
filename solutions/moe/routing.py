"""Routing tokens to experts (lecture 04-mixture-of-experts, sections 2 to 4).

Shapes: T tokens, E experts, k experts per token, d = d_model, C = capacity (tokens per expert).

    router_logits (T, E) --topk_route--> weights (T, k), expert_ids (T, k)
    x (T, d) --dispatch--> expert_inputs (E, C, d), slots (T, k)
    expert_outputs (E, C, d) --combine--> y (T, d)

No Python loop over tokens anywhere: the grader counts the tensor operations of a forward pass
over T and over 8T tokens, and they must be the same number.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def topk_route(router_logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-k gating as in Mixtral: return (weights, expert_ids), both of shape (T, k).

    probs = softmax(router_logits) over all E experts (in the logits' dtype); each token keeps
    its k most probable experts, in decreasing order of probability, and their probabilities
    renormalised to sum to 1 over the k choices:

        weights[t, j] = probs[t, expert_ids[t, j]] / sum_j' probs[t, expert_ids[t, j']]

    Ties go to the lower expert index. (torch.topk does not promise any order among equal
    values; a stable descending sort does.) expert_ids are int64. Raises ValueError unless
    1 <= k <= E.
    """
    ### BEGIN SOLUTION
    num_experts = router_logits.shape[-1]
    if not 1 <= k <= num_experts:
        raise ValueError(f"k must be between 1 and the number of experts ({num_experts}), got {k}")
    probs = router_logits.softmax(dim=-1)
    top_probs, expert_ids = probs.sort(dim=-1, descending=True, stable=True)
    top_probs, expert_ids = top_probs[:, :k], expert_ids[:, :k]
    return top_probs / top_probs.sum(dim=-1, keepdim=True), expert_ids
    ### END SOLUTION


def expert_capacity(num_tokens: int, num_experts: int, k: int, capacity_factor: float | None) -> int:
    """Slots per expert buffer: ceil(capacity_factor * num_tokens * k / num_experts), at most
    num_tokens (a token goes to an expert once at most).

    capacity_factor=None means no token is ever dropped: the capacity is num_tokens. With a factor of 1.0
    and a perfectly even router every slot is used; above 1.0 there is slack for imbalance.
    Raises ValueError for a capacity_factor <= 0.
    """
    ### BEGIN SOLUTION
    if capacity_factor is None:
        return num_tokens
    if capacity_factor <= 0:
        raise ValueError(f"capacity_factor must be positive, got {capacity_factor}")
    return min(num_tokens, math.ceil(capacity_factor * num_tokens * k / num_experts))
    ### END SOLUTION


def dispatch(
    x: torch.Tensor, expert_ids: torch.Tensor, num_experts: int, capacity: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Copy tokens into per-expert buffers: return (expert_inputs, slots).

    x is (T, d), expert_ids (T, k). expert_inputs is (num_experts, capacity, d): row s of expert
    e's buffer holds the token whose choice was given slot s in e, and zeros where no token was
    given that slot. slots is int64 (T, k): the slot of choice (t, j) in expert expert_ids[t, j],
    or -1 when that choice was dropped.

    Slots are handed out in priority order (GShard): first choices before second choices, and
    within the same choice rank, tokens in batch order. An expert's first `capacity` choices in
    that order keep their slot (0, 1, 2, ...); the rest are dropped for that expert. Example,
    k=2, capacity 1: expert_ids [[0, 1], [1, 0]] gives slots [[0, -1], [0, -1]] (both first
    choices fit; each second choice finds its expert full).

    Differentiable with respect to x.
    """
    ### BEGIN SOLUTION
    num_tokens, k = expert_ids.shape
    # Priority order: choice-major, (k, T) flattened. position = how many earlier choices in
    # that order went to the same expert: a cumulative count over a one-hot matrix.
    ordered = expert_ids.t().reshape(-1)
    one_hot = F.one_hot(ordered, num_experts)
    position = (one_hot.cumsum(dim=0) * one_hot).sum(dim=-1) - 1
    kept = position < capacity
    slots = torch.where(kept, position, -1).view(k, num_tokens).t()

    # Scatter every kept choice into its (expert, slot) row; dropped ones go to a spare row.
    token = torch.arange(num_tokens, device=x.device).repeat(k)
    flat_row = torch.where(kept, ordered * capacity + position, num_experts * capacity)
    buffer = x.new_zeros(num_experts * capacity + 1, x.shape[-1])
    buffer = buffer.index_copy(0, flat_row, x[token])
    return buffer[:-1].view(num_experts, capacity, x.shape[-1]), slots  # explicit d: capacity may be 0
    ### END SOLUTION


def combine(
    expert_outputs: torch.Tensor, expert_ids: torch.Tensor, weights: torch.Tensor, slots: torch.Tensor
) -> torch.Tensor:
    """Undo dispatch and mix: y[t] = sum over kept choices j of weights[t, j] * out[e, s].

    expert_outputs is (E, C, d), e = expert_ids[t, j] and s = slots[t, j] as dispatch returned
    them. A dropped choice (slot -1) adds nothing; a token dropped by all its experts gets a
    row of zeros (the residual connection around the layer carries it). Returns (T, d) in
    expert_outputs' dtype; differentiable with respect to expert_outputs and weights.
    """
    ### BEGIN SOLUTION
    num_experts, capacity, d_model = expert_outputs.shape
    kept = slots >= 0
    rows = expert_ids * capacity + slots.clamp(min=0)  # (T, k) rows of the flat (E*C, d) outputs
    picked = expert_outputs.reshape(num_experts * capacity, d_model)[rows]  # (T, k, d)
    gate = torch.where(kept, weights, torch.zeros_like(weights)).to(expert_outputs.dtype)
    return (gate.unsqueeze(-1) * picked).sum(dim=1)
    ### END SOLUTION


def load_balancing_loss(router_logits: torch.Tensor, expert_ids: torch.Tensor, num_experts: int) -> torch.Tensor:
    """The Switch Transformer auxiliary loss, counted over all k choices as Mixtral does:

        loss = E * sum_e f_e * P_e
        f_e  = (number of choices (t, j) with expert_ids[t, j] == e) / T   (sums to k over e)
        P_e  = mean over tokens of softmax(router_logits)[:, e]

    f is a count and carries no gradient; P does, so the loss pushes probability away from the
    experts that receive the most tokens. A perfectly even router gives k. Returns a scalar.
    """
    ### BEGIN SOLUTION
    num_tokens = router_logits.shape[0]
    counts = torch.bincount(expert_ids.reshape(-1), minlength=num_experts)
    fraction = counts.to(router_logits.dtype) / num_tokens
    mean_prob = router_logits.softmax(dim=-1).mean(dim=0)
    return num_experts * (fraction * mean_prob).sum()
    ### END SOLUTION


def router_z_loss(router_logits: torch.Tensor) -> torch.Tensor:
    """The ST-MoE router z-loss: mean over tokens of logsumexp(logits_t)^2, a scalar.

    It keeps the logits small, where the softmax is numerically tame.
    """
    ### BEGIN SOLUTION
    return router_logits.logsumexp(dim=-1).square().mean()
    ### END SOLUTION
