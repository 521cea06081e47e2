"""Hidden suite: swiglu_experts and MoELayer against the loop-over-experts reference of
grader/suites/moe/reference.py (outputs, auxiliary losses, and gradients by autograd through
the reference). The layer is built in the worker and given the grader's weights with
load_state_dict; float64 throughout, so that only rounding separates the two."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

from grader.sandbox import Saved, Step
from grader.suites.moe.reference import (
    make_params,
    mixtral_load_balancing_loss,
    mixtral_route,
    moe_forward,
    reference_grads,
    swiglu,
    z_loss,
)
from grader.testing import assert_matches, generator

TOL = (1e-9, 1e-10)


@dataclass(frozen=True)
class Config:
    name: str
    d_model: int
    d_ff: int
    experts: int
    k: int
    capacity_factor: float | None
    shared: int
    batch: tuple[int, ...]  # leading shape of x

    @property
    def args(self) -> tuple:
        return (self.d_model, self.d_ff, self.experts, self.k, self.capacity_factor, self.shared)

    def params(self, *salt: object) -> dict[str, torch.Tensor]:
        gen = generator("params", self.name, *salt)
        return make_params(self.d_model, self.d_ff, self.experts, self.shared, gen, torch.float64)

    def x(self, *salt: object) -> torch.Tensor:
        return torch.randn(*self.batch, self.d_model, generator=generator("x", self.name, *salt), dtype=torch.float64)


CONFIGS = [
    Config("dropless-k2", 16, 24, 8, 2, None, 0, (48,)),
    Config("capacity-1.0-k2-shared", 16, 24, 8, 2, 1.0, 1, (6, 9)),
    Config("capacity-0.5-k1", 12, 20, 4, 1, 0.5, 0, (40,)),
    Config("dropless-k4-two-shared", 8, 16, 6, 4, None, 2, (3, 5, 4)),
]


def layer_steps(config: Config, params: dict[str, torch.Tensor]) -> list[Step]:
    return [
        Step("MoELayer", config.args, save_as="layer", send_back=False),
        Step("layer.double", send_back=False),
        Step("layer.load_state_dict", (params,), send_back=False),
    ]


@pytest.mark.points(3)
def test_swiglu_experts_applies_each_experts_network_to_its_buffer(submission):
    gen = generator("swiglu")
    buffers = torch.randn(5, 7, 8, generator=gen, dtype=torch.float64)
    buffers[2, 4:] = 0  # unused slots
    weights = [torch.randn(5, *shape, generator=gen, dtype=torch.float64) for shape in ((8, 12), (8, 12), (12, 8))]
    got = submission.function("swiglu_experts")(buffers, *weights)
    expected = torch.stack([swiglu(buffers[e], *(w[e] for w in weights)) for e in range(5)])
    assert_matches(got, expected, "swiglu_experts: (silu(x @ w_gate) * (x @ w_up)) @ w_down per expert", *TOL)


@pytest.mark.points(3)
@pytest.mark.parametrize("config", CONFIGS, ids=[c.name for c in CONFIGS])
def test_moe_layer_matches_the_loop_over_experts_reference(submission, config):
    """Output (capacity and dropping included, shared experts added), both auxiliary losses and
    the tokens per expert."""
    params, x = config.params(), config.x()
    result = submission.script([*layer_steps(config, params), Step("layer.forward", (x,))])
    y, aux = result.steps[0][-1]
    with torch.no_grad():
        expected, _ = moe_forward(params, x, config.k, config.capacity_factor)
    assert_matches(y, expected, f"{config.name}: MoELayer output", *TOL)
    tokens = x.reshape(-1, config.d_model)
    logits = tokens @ params["router.weight"].t()
    ids = mixtral_route(logits, config.k)[1]
    balance = mixtral_load_balancing_loss(logits, ids, config.experts)
    assert_matches(aux["load_balancing_loss"], balance, f"{config.name}: aux['load_balancing_loss']", *TOL)
    assert_matches(aux["router_z_loss"], z_loss(logits), f"{config.name}: aux['router_z_loss']", *TOL)
    counts = torch.bincount(ids.reshape(-1), minlength=config.experts)
    assert_matches(aux["tokens_per_expert"], counts, f"{config.name}: aux['tokens_per_expert'] (before dropping)")


@pytest.mark.points(4)
@pytest.mark.parametrize("config", [CONFIGS[0], CONFIGS[1]], ids=[CONFIGS[0].name, CONFIGS[1].name])
def test_moe_layer_gradients_reach_the_router_and_every_used_expert(submission, config):
    """dL/dx and dL/dparameter match autograd through the reference, for
    L = sum(y * g) + 0.1 * balancing loss + 0.01 * z-loss."""
    params, x = config.params("grad"), config.x("grad")
    grad_output = torch.randn(x.shape, generator=generator("g", config.name), dtype=torch.float64)
    steps = [
        *layer_steps(config, params),
        Step("layer.forward", (x,), send_back=False),  # so that a missing forward is named as such
        Step("forward_backward", (Saved("layer"), x, grad_output, 0.1, 0.01)),
    ]
    got = submission.script(steps).steps[0][-1]
    y, x_grad, grads = reference_grads(params, x, grad_output, config.k, config.capacity_factor, 0.1, 0.01)
    assert_matches(got["y"], y, f"{config.name}: output", *TOL)
    assert_matches(got["x_grad"], x_grad, f"{config.name}: gradient of the input x", *TOL)
    for name, expected in grads.items():
        assert_matches(got["grads"][name], expected, f"{config.name}: gradient of {name}", *TOL)


@pytest.mark.points(2)
def test_moe_layer_without_capacity_drops_nothing_even_when_one_expert_gets_every_token(submission):
    config = Config("all-to-one", 8, 16, 4, 1, None, 0, (32,))
    params, x = config.params(), config.x()
    params["router.weight"] = torch.zeros_like(params["router.weight"])
    params["router.weight"][2] = 1.0
    x = x.abs()  # every token's logit is largest for expert 2
    y, aux = submission.script([*layer_steps(config, params), Step("layer.forward", (x,))]).steps[0][-1]
    expected = swiglu(x, params["w_gate"][2], params["w_up"][2], params["w_down"][2])
    assert_matches(aux["tokens_per_expert"], torch.tensor([0, 0, 32, 0]), "tokens_per_expert")
    assert_matches(y, expected, "capacity_factor=None: every token must be processed by expert 2", *TOL)
