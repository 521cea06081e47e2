"""Hidden suite: the promises of the moe docstrings that the other files leave untested
(tests/spec/promises.toml maps every promise to its tests). References are those of
grader/suites/moe/reference.py (Mixtral's router and balancing loss, the ST-MoE z-loss, the
loop-over-experts layer), computed in float64 in the grader:

- expert_capacity's ValueError for a negative factor (0.0 is in test_moe_routing);
- the softmax of topk_route and load_balancing_loss, and the logsumexp of router_z_loss, on
  float32 logits near 100, where exp() overflows (the lecture: logsumexp never overflows);
- combine's result in expert_outputs' dtype when the weights come in another;
- MoELayer.shared_experts on its own, and expert_parallel_forward's y in x's shape (..., d_model).
"""

from __future__ import annotations

import pytest
import torch

from grader.sandbox import Saved, Step
from grader.suites.moe.reference import (
    make_params,
    mixtral_load_balancing_loss,
    mixtral_route,
    moe_forward,
    swiglu,
    z_loss,
)
from grader.testing import assert_matches, expect_exception, generator, tolerance


@pytest.mark.points(1)
def test_expert_capacity_rejects_a_negative_factor(submission):
    """Docstring: "Raises ValueError for a capacity_factor <= 0"."""
    try:
        expect_exception("ValueError", lambda: submission.function("expert_capacity")(64, 8, 2, -1.0))
    except AssertionError as error:
        raise AssertionError(f"expert_capacity(64, 8, 2, capacity_factor=-1.0): {error}") from None


def _large_logits(*salt: object) -> torch.Tensor:
    """float32 router logits of 95 +- 5 (std): exp() of them overflows float32 (above e^88.7),
    while their differences stay small enough that no probability underflows to a tie."""
    return 95 + 5 * torch.randn(37, 8, generator=generator("large-logits", *salt))


@pytest.mark.points(1)
def test_topk_route_is_stable_for_large_logits(submission):
    logits = _large_logits("route")
    weights, ids = submission.function("topk_route")(logits, 2)
    expected_weights, expected_ids = mixtral_route(logits, 2)
    what = "topk_route(k=2) on float32 logits near 100"
    assert_matches(ids, expected_ids, f"{what}: expert_ids")
    assert_matches(
        weights,
        expected_weights,
        f"{what}: weights (a softmax that exponentiates the raw logits overflows to inf and gives NaN; "
        "torch.softmax subtracts the maximum)",
        *tolerance(torch.float32, 8),
    )


@pytest.mark.points(1)
def test_load_balancing_loss_is_stable_for_large_logits(submission):
    logits = _large_logits("balance")
    ids = mixtral_route(logits, 2)[1]
    got = submission.function("load_balancing_loss")(logits, ids, 8)
    assert_matches(
        got,
        mixtral_load_balancing_loss(logits, ids, 8).float(),
        "load_balancing_loss on float32 logits near 100 (the softmax must not overflow)",
        1e-5,
        1e-6,
    )


@pytest.mark.points(1)
def test_router_z_loss_is_stable_for_large_logits(submission):
    """Lecture section 4: router_z_loss computes it with logsumexp, which never overflows."""
    logits = _large_logits("z")
    got = submission.function("router_z_loss")(logits)
    assert_matches(
        got,
        z_loss(logits).float(),
        "router_z_loss on float32 logits near 100: log(sum(exp(logits))) overflows to inf there; "
        "torch.logsumexp does not",
        1e-5,
        1e-6,
    )


@pytest.mark.points(1)
def test_combine_returns_the_dtype_of_the_expert_outputs(submission):
    """float32 expert outputs with float64 weights: y is float32 (weights * outputs would promote)."""
    ids = torch.tensor([[0, 1], [1, 2], [2, 0], [0, 2]])
    slots = torch.tensor([[0, 0], [1, 0], [1, 1], [-1, -1]])
    gen = generator("combine-dtype")
    outputs = torch.randn(3, 2, 5, generator=gen)
    weights = torch.rand(4, 2, generator=gen, dtype=torch.float64)
    y = submission.function("combine")(outputs, ids, weights, slots)
    expected = torch.zeros(4, 5, dtype=torch.float64)
    for t, j in zip(*torch.nonzero(slots >= 0, as_tuple=True)):
        expected[t] += weights[t, j] * outputs[ids[t, j], slots[t, j]].double()
    assert_matches(
        y, expected.float(), "combine of float32 expert outputs with float64 weights (returns float32)", 1e-6, 1e-6
    )


@pytest.mark.points(1)
def test_moe_layer_shared_experts_sums_every_shared_expert(submission):
    """shared_experts((T, d)) on its own: the sum over the S shared SwiGLU experts, every token."""
    params = make_params(8, 12, 4, 3, generator("shared-params"), torch.float64)
    tokens = torch.randn(10, 8, generator=generator("shared-x"), dtype=torch.float64)
    steps = [
        Step("MoELayer", (8, 12, 4, 2, None, 3), save_as="layer", send_back=False),
        Step("layer.double", send_back=False),
        Step("layer.load_state_dict", (params,), send_back=False),
        Step("layer.shared_experts", (tokens,)),
    ]
    got = submission.script(steps).steps[0][-1]
    expected = sum(
        swiglu(tokens, params["shared_w_gate"][s], params["shared_w_up"][s], params["shared_w_down"][s])
        for s in range(3)
    )
    assert_matches(
        got, expected, "MoELayer.shared_experts with 3 shared experts: the sum of their outputs", 1e-10, 1e-10
    )


@pytest.mark.points(2)
def test_expert_parallel_forward_keeps_the_shape_of_x(submission):
    """2 ranks, x of shape (2, 3, d) and (1, 4, d): y has x's shape and equals the dropless
    loop-over-experts layer on both ranks' tokens together."""
    d_model, d_ff, experts, k = 8, 12, 4, 2
    params = make_params(d_model, d_ff, experts, 0, generator("ep-shape"), torch.float64)
    gen = generator("ep-shape-x")
    xs = [
        torch.randn(2, 3, d_model, generator=gen, dtype=torch.float64),
        torch.randn(1, 4, d_model, generator=gen, dtype=torch.float64),
    ]
    steps = [
        [
            Step("MoELayer", (d_model, d_ff, experts, k, None, 0), save_as="layer", send_back=False),
            Step("layer.double", send_back=False),
            Step("layer.load_state_dict", (params,), send_back=False),
            Step("shard_experts", (Saved("layer"),), save_as="shard", send_back=False),
            Step("expert_parallel_forward", (Saved("shard"), x)),
        ]
        for x in xs
    ]
    got = [rank[-1] for rank in submission.script_spmd(2, steps).steps]
    with torch.no_grad():
        whole, _ = moe_forward(params, torch.cat([x.reshape(-1, d_model) for x in xs]), k, None)
    for rank, (x, expected) in enumerate(zip(xs, whole.split([6, 4]))):
        assert tuple(got[rank].shape) == tuple(x.shape), (
            f"rank {rank}: expert_parallel_forward returned shape {tuple(got[rank].shape)} for x of shape "
            f"{tuple(x.shape)}: y must have x's shape"
        )
        assert_matches(
            got[rank], expected.view_as(x), f"rank {rank}: y for its tokens of shape {tuple(x.shape)}", 1e-9, 1e-10
        )


@pytest.mark.points(1)
def test_topk_route_accepts_k_equal_to_the_number_of_experts(submission):
    """"Raises ValueError unless 1 <= k <= E": k == E is valid, every expert in order of
    probability, the weights being the full softmax (reference: mixtral_route)."""
    logits = torch.randn(9, 4, generator=generator("k-equals-e"))
    weights, ids = submission.function("topk_route")(logits, 4)
    expected_weights, expected_ids = mixtral_route(logits, 4)
    assert_matches(ids, expected_ids, "topk_route(k=4) with 4 experts: expert_ids (k == E is allowed)")
    assert_matches(weights, expected_weights, "topk_route(k=4) with 4 experts: weights", *tolerance(torch.float32, 4))
