"""Trusted references for the moe suite: plain code, written here, run in the grader's process
(or, for timing, in a trusted worker that never imports a submission).

Hugging Face `transformers` is not installed in the grading environment, so the Mixtral
semantics are transcribed here from our reading of its implementation (MixtralSparseMoeBlock
and load_balancing_loss_func in modeling_mixtral.py), not imported:

- router: softmax over all experts (in float), top-k, the k weights renormalised to sum to 1;
- balancing loss: one-hot of the selected experts (T, k, E) averaged over tokens (k, E), times
  the mean router probability per expert (E), summed, times E (so every choice counts and a
  perfectly even router scores k).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

EXPERT_WEIGHTS = ("w_gate", "w_up", "w_down")


def mixtral_route(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Mixtral's router: (weights, expert_ids), ties toward the lower index (a stable sort)."""
    probs = F.softmax(logits, dim=-1, dtype=torch.float64)
    values, ids = torch.sort(probs, dim=-1, descending=True, stable=True)
    values, ids = values[:, :k], ids[:, :k]
    return (values / values.sum(-1, keepdim=True)).to(logits.dtype), ids


def mixtral_load_balancing_loss(logits: torch.Tensor, expert_ids: torch.Tensor, num_experts: int) -> torch.Tensor:
    """Mixtral's load_balancing_loss_func, for one layer and no attention mask."""
    probs = F.softmax(logits.double(), dim=-1)
    expert_mask = F.one_hot(expert_ids, num_experts).double()  # (T, k, E)
    tokens_per_expert = expert_mask.mean(dim=0)  # (k, E)
    router_prob_per_expert = probs.mean(dim=0)  # (E,)
    return (tokens_per_expert * router_prob_per_expert.unsqueeze(0)).sum() * num_experts


def z_loss(logits: torch.Tensor) -> torch.Tensor:
    """ST-MoE (Zoph et al. 2022), eq. 5: mean over tokens of (log sum_j exp x_j)^2."""
    return (torch.logsumexp(logits.double(), dim=-1) ** 2).mean()


def capacity(num_tokens: int, num_experts: int, k: int, factor: float | None) -> int:
    return num_tokens if factor is None else min(num_tokens, math.ceil(factor * num_tokens * k / num_experts))


def priority_slots(expert_ids: torch.Tensor, num_experts: int, cap: int) -> torch.Tensor:
    """GShard's policy by plain loops: first choices before second, batch order within each;
    slot -1 once an expert is full."""
    num_tokens, k = expert_ids.shape
    used = [0] * num_experts
    slots = torch.full((num_tokens, k), -1, dtype=torch.int64)
    for j in range(k):
        for t in range(num_tokens):
            e = int(expert_ids[t, j])
            if used[e] < cap:
                slots[t, j] = used[e]
            used[e] += 1
    return slots


def swiglu(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor, w_down: torch.Tensor) -> torch.Tensor:
    return (F.silu(x @ w_gate) * (x @ w_up)) @ w_down


def moe_forward(
    params: dict[str, torch.Tensor],
    x: torch.Tensor,
    k: int,
    capacity_factor: float | None,
    balance_coef: float = 0.0,
    z_coef: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The MoE layer as a loop over experts (vectorised over tokens): (y, loss extra).

    params are MoELayer's state_dict entries (leaf tensors may require grad). Returns y and
    balance_coef * balancing loss + z_coef * z-loss, so that autograd through this gives the
    reference gradients.
    """
    tokens = x.reshape(-1, x.shape[-1])
    logits = tokens @ params["router.weight"].t()
    num_experts = logits.shape[-1]
    weights, ids = mixtral_route(logits, k)
    if capacity_factor is None:
        kept = torch.ones_like(ids, dtype=torch.bool)
    else:
        cap = capacity(tokens.shape[0], num_experts, k, capacity_factor)
        kept = priority_slots(ids, num_experts, cap) >= 0
    y = torch.zeros_like(tokens)
    for e in range(num_experts):
        token, choice = torch.nonzero((ids == e) & kept, as_tuple=True)
        if token.numel():
            out = swiglu(tokens[token], *(params[name][e] for name in EXPERT_WEIGHTS))
            y = y.index_add(0, token, weights[token, choice].unsqueeze(-1) * out)
    shared = [name for name in params if name.startswith("shared_w_gate")]
    if shared:
        for s in range(params["shared_w_gate"].shape[0]):
            y = y + swiglu(tokens, *(params[f"shared_{name}"][s] for name in EXPERT_WEIGHTS))
    extra = balance_coef * mixtral_load_balancing_loss(logits, ids, num_experts).to(x.dtype)
    extra = extra + z_coef * z_loss(logits).to(x.dtype)
    return y.view_as(x), extra


def moe_forward_timed(params: dict[str, torch.Tensor], x: torch.Tensor, k: int) -> None:
    """The dropless reference forward, timed in a trusted worker against a submission's
    MoELayer.forward on the same inputs. The weights require grad, as a module's parameters
    do, so both build the same kind of autograd graph."""
    params = {name: p.requires_grad_(True) for name, p in params.items()}
    moe_forward(params, x, k, None)


def make_params(
    d_model: int, d_ff: int, num_experts: int, num_shared: int, gen: torch.Generator, dtype: torch.dtype
) -> dict[str, torch.Tensor]:
    """Random weights in MoELayer's state_dict layout (router logits of order 1)."""

    def normal(*shape: int, fan_in: int) -> torch.Tensor:
        return (torch.randn(shape, generator=gen, dtype=torch.float64) / fan_in**0.5).to(dtype)

    params = {"router.weight": normal(num_experts, d_model, fan_in=d_model // 4)}
    for prefix, count in (("", num_experts), ("shared_", num_shared)):
        if count:
            params[f"{prefix}w_gate"] = normal(count, d_model, d_ff, fan_in=d_model)
            params[f"{prefix}w_up"] = normal(count, d_model, d_ff, fan_in=d_model)
            params[f"{prefix}w_down"] = normal(count, d_ff, d_model, fan_in=d_ff)
    return params


def reference_grads(
    params: dict[str, torch.Tensor],
    x: torch.Tensor,
    grad_output: torch.Tensor,
    k: int,
    capacity_factor: float | None,
    balance_coef: float = 0.0,
    z_coef: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
    """(y, dL/dx, {name: dL/dparameter}) by autograd through moe_forward, for
    L = sum(y * grad_output) + balance_coef * balancing loss + z_coef * z-loss."""
    leaves = {name: p.detach().clone().requires_grad_(True) for name, p in params.items()}
    x = x.detach().clone().requires_grad_(True)
    y, extra = moe_forward(leaves, x, k, capacity_factor, balance_coef, z_coef)
    ((y * grad_output).sum() + extra).backward()
    grads = {name: p.grad if p.grad is not None else torch.zeros_like(p) for name, p in leaves.items()}
    return y.detach(), x.grad, grads
