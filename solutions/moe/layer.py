"""A Mixture-of-Experts feed-forward layer (lecture 04-mixture-of-experts, sections 1 to 5).

    y = sum over shared experts s of FFN_s(x)  +  sum over the token's top-k experts e of g_e * FFN_e(x)

Every expert is a SwiGLU feed-forward network (as in Mixtral and DeepSeekMoE):

    FFN(x) = (silu(x @ w_gate) * (x @ w_up)) @ w_down

The weights of all routed experts are stacked in three parameters, so the experts run as three
batched matrix products over their (E, C, d) buffers rather than as a Python loop.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from routing import combine, dispatch, expert_capacity, load_balancing_loss, router_z_loss, topk_route
from torch import nn


def swiglu_experts(
    expert_inputs: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor, w_down: torch.Tensor
) -> torch.Tensor:
    """Apply expert e's SwiGLU network to every row of its buffer, for all experts at once.

    expert_inputs (E, C, d), w_gate and w_up (E, d, d_ff), w_down (E, d_ff, d); returns (E, C, d):

        out[e] = (silu(expert_inputs[e] @ w_gate[e]) * (expert_inputs[e] @ w_up[e])) @ w_down[e]

    A row of zeros (an unused slot) gives a row of zeros.
    """
    ### BEGIN SOLUTION
    hidden = F.silu(torch.bmm(expert_inputs, w_gate)) * torch.bmm(expert_inputs, w_up)
    return torch.bmm(hidden, w_down)
    ### END SOLUTION


class MoELayer(nn.Module):
    """Top-k routed SwiGLU experts plus optional always-on shared experts (DeepSeekMoE).

    Parameters (given; the grader loads its own values with load_state_dict):
      router.weight            (E, d_model)         router logits = x @ router.weight.T
      w_gate, w_up             (E, d_model, d_ff)   routed experts, stacked
      w_down                   (E, d_ff, d_model)
      shared_w_gate, shared_w_up, shared_w_down     the same for the S shared experts, only
                                                    present when num_shared_experts > 0

    capacity_factor=None: no token is ever dropped (each buffer is as long as the busiest
    expert's load). Otherwise buffers have expert_capacity(T, E, k, capacity_factor) slots.
    """

    def __init__(
        self,
        d_model: int,
        d_ff: int,
        num_experts: int,
        k: int,
        capacity_factor: float | None = None,
        num_shared_experts: int = 0,
    ) -> None:
        super().__init__()
        self.d_model, self.d_ff, self.num_experts, self.k = d_model, d_ff, num_experts, k
        self.capacity_factor = capacity_factor
        self.num_shared_experts = num_shared_experts
        self.router = nn.Linear(d_model, num_experts, bias=False)
        self.w_gate, self.w_up, self.w_down = self._experts(num_experts)
        if num_shared_experts > 0:
            self.shared_w_gate, self.shared_w_up, self.shared_w_down = self._experts(num_shared_experts)

    def _experts(self, count: int) -> tuple[nn.Parameter, nn.Parameter, nn.Parameter]:
        """`count` stacked SwiGLU experts, initialised with variance 1/fan_in."""
        d, f = self.d_model, self.d_ff
        return (
            nn.Parameter(torch.randn(count, d, f) / d**0.5),
            nn.Parameter(torch.randn(count, d, f) / d**0.5),
            nn.Parameter(torch.randn(count, f, d) / f**0.5),
        )

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Return (y, aux) for x of shape (..., d_model); y has x's shape.

        aux = {"load_balancing_loss": scalar, "router_z_loss": scalar,
               "tokens_per_expert": int64 (E,) count of the choices each expert got, before
               dropping}

        Steps: router logits -> topk_route -> dispatch into buffers -> swiglu_experts ->
        combine; plus every shared expert applied to every token. The losses are computed on
        the router logits of this call (they are not added to y; the training loop weights
        them). No Python loop over tokens.
        """
        ### BEGIN SOLUTION
        tokens = x.reshape(-1, self.d_model)
        logits = self.router(tokens)
        weights, expert_ids = topk_route(logits, self.k)
        counts = torch.bincount(expert_ids.reshape(-1), minlength=self.num_experts)
        if self.capacity_factor is None:
            capacity = int(counts.max())  # dropless: as long as the busiest expert's load
        else:
            capacity = expert_capacity(tokens.shape[0], self.num_experts, self.k, self.capacity_factor)

        expert_inputs, slots = dispatch(tokens, expert_ids, self.num_experts, capacity)
        expert_outputs = swiglu_experts(expert_inputs, self.w_gate, self.w_up, self.w_down)
        y = combine(expert_outputs, expert_ids, weights, slots)
        if self.num_shared_experts > 0:
            y = y + self.shared_experts(tokens)

        aux = {
            "load_balancing_loss": load_balancing_loss(logits, expert_ids, self.num_experts),
            "router_z_loss": router_z_loss(logits),
            "tokens_per_expert": counts,
        }
        return y.view_as(x), aux
        ### END SOLUTION

    def shared_experts(self, tokens: torch.Tensor) -> torch.Tensor:
        """Sum of the S shared experts' outputs on every token: (T, d) -> (T, d)."""
        ### BEGIN SOLUTION
        every = tokens.unsqueeze(0).expand(self.num_shared_experts, -1, -1)
        return swiglu_experts(every, self.shared_w_gate, self.shared_w_up, self.shared_w_down).sum(dim=0)
        ### END SOLUTION


def forward_backward(
    layer: nn.Module,
    x: torch.Tensor,
    grad_output: torch.Tensor,
    balance_coef: float = 0.0,
    z_coef: float = 0.0,
) -> dict[str, object]:
    """Given (the grader calls it): one forward and backward pass of `layer` on x.

    loss = sum(y * grad_output) + balance_coef * load_balancing_loss + z_coef * router_z_loss.
    Returns {"y": y, "aux": aux, "x_grad": dL/dx, "grads": {parameter name: dL/dparameter}}
    (zeros for a parameter that received no gradient).
    """
    layer.zero_grad(set_to_none=True)
    x = x.detach().requires_grad_(True)
    y, aux = layer(x)
    loss = (y * grad_output).sum() + balance_coef * aux["load_balancing_loss"] + z_coef * aux["router_z_loss"]
    loss.backward()
    grads = {name: p.grad if p.grad is not None else torch.zeros_like(p) for name, p in layer.named_parameters()}
    return {"y": y.detach(), "aux": aux, "x_grad": x.grad, "grads": grads}
