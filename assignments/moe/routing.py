# Your working copy: replace every `raise NotImplementedError` with your implementation.
# (Generated from the course's reference by `python -m grader sync`.)
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
    raise NotImplementedError("implement topk_route (lectures/04-mixture-of-experts.md, section 2)")


def expert_capacity(num_tokens: int, num_experts: int, k: int, capacity_factor: float | None) -> int:
    """Slots per expert buffer: ceil(capacity_factor * num_tokens * k / num_experts), at most
    num_tokens (a token goes to an expert once at most).

    capacity_factor=None means no token is ever dropped: the capacity is num_tokens. With a factor of 1.0
    and a perfectly even router every slot is used; above 1.0 there is slack for imbalance.
    Raises ValueError for a capacity_factor <= 0.
    """
    raise NotImplementedError("implement expert_capacity (lectures/04-mixture-of-experts.md, section 3)")


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
    raise NotImplementedError("implement dispatch (lectures/04-mixture-of-experts.md, section 3)")


def combine(
    expert_outputs: torch.Tensor, expert_ids: torch.Tensor, weights: torch.Tensor, slots: torch.Tensor
) -> torch.Tensor:
    """Undo dispatch and mix: y[t] = sum over kept choices j of weights[t, j] * out[e, s].

    expert_outputs is (E, C, d), e = expert_ids[t, j] and s = slots[t, j] as dispatch returned
    them. A dropped choice (slot -1) adds nothing; a token dropped by all its experts gets a
    row of zeros (the residual connection around the layer carries it). Returns (T, d) in
    expert_outputs' dtype; differentiable with respect to expert_outputs and weights.
    """
    raise NotImplementedError("implement combine (lectures/04-mixture-of-experts.md, section 3)")


def load_balancing_loss(router_logits: torch.Tensor, expert_ids: torch.Tensor, num_experts: int) -> torch.Tensor:
    """The Switch Transformer auxiliary loss, counted over all k choices as Mixtral does:

        loss = E * sum_e f_e * P_e
        f_e  = (number of choices (t, j) with expert_ids[t, j] == e) / T   (sums to k over e)
        P_e  = mean over tokens of softmax(router_logits)[:, e]

    f is a count and carries no gradient; P does, so the loss pushes probability away from the
    experts that receive the most tokens. A perfectly even router gives k. Returns a scalar.
    """
    raise NotImplementedError("implement load_balancing_loss (lectures/04-mixture-of-experts.md, section 4)")


def router_z_loss(router_logits: torch.Tensor) -> torch.Tensor:
    """The ST-MoE router z-loss: mean over tokens of logsumexp(logits_t)^2, a scalar.

    It keeps the logits small, where the softmax is numerically tame.
    """
    raise NotImplementedError("implement router_z_loss (lectures/04-mixture-of-experts.md, section 4)")
