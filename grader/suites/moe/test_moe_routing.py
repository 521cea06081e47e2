"""Hidden suite: routing, capacity, dispatch/combine and the auxiliary losses.

References are written in grader/suites/moe/reference.py: Mixtral's router and balancing loss
as transcribed from Hugging Face's modeling_mixtral.py (transformers is not installed here),
the ST-MoE z-loss, and GShard's slot-assignment policy as plain loops. Inputs are random per run.
"""

from __future__ import annotations

import pytest
import torch

from grader.suites.moe.reference import (
    capacity,
    mixtral_load_balancing_loss,
    mixtral_route,
    priority_slots,
    z_loss,
)
from grader.testing import assert_matches, expect_exception, generator, tolerance


def _logits(tokens: int, experts: int, dtype: torch.dtype, *salt: object) -> torch.Tensor:
    return (2 * torch.randn(tokens, experts, generator=generator(*salt), dtype=torch.float64)).to(dtype)


ROUTES = [(1, 8, torch.float32), (2, 8, torch.float64), (4, 8, torch.float32), (3, 6, torch.float64)]


@pytest.mark.points(2)
@pytest.mark.parametrize(("k", "experts", "dtype"), ROUTES, ids=["k1-f32", "k2-f64", "k4-f32", "k3-of-6-experts-f64"])
def test_topk_route_matches_the_mixtral_router(submission, k, experts, dtype):
    """softmax over all experts, top-k in decreasing order, weights renormalised to sum to 1;
    k and E powers of two and not (k = 3 of E = 6)."""
    logits = _logits(97, experts, dtype, "route", k)
    weights, ids = submission.function("topk_route")(logits, k)
    expected_weights, expected_ids = mixtral_route(logits, k)
    what = f"k={k} of {experts} experts"
    assert_matches(ids, expected_ids, f"expert_ids ({what}): the k most probable experts, most probable first")
    rtol, atol = tolerance(dtype, experts)
    assert_matches(weights, expected_weights, f"weights ({what}): top-k probabilities renormalised", rtol, atol)


@pytest.mark.points(2)
def test_topk_route_breaks_ties_toward_the_lower_expert_index(submission):
    """Equal logits: the lower index wins (a stable descending sort; torch.topk promises no order)."""
    logits = torch.tensor([[1.0, 3.0, 3.0, 3.0, 0.0], [2.0, 2.0, 2.0, 2.0, 2.0], [0.0, 5.0, 0.0, 5.0, 0.0]])
    weights, ids = submission.function("topk_route")(logits, 3)
    assert_matches(ids, torch.tensor([[1, 2, 3], [0, 1, 2], [1, 3, 0]]), "expert_ids with tied logits")
    assert_matches(weights, mixtral_route(logits, 3)[0], "weights with tied logits", 1e-6, 1e-7)


@pytest.mark.points(1)
@pytest.mark.parametrize("k", [0, 9], ids=["k0", "k-above-E"])
def test_topk_route_rejects_k_outside_one_to_num_experts(submission, k):
    expect_exception("ValueError", lambda: submission.function("topk_route")(torch.zeros(4, 8), k))


CAPACITY_CASES = [
    # (num_tokens, num_experts, k, capacity_factor) -> ceil(cf * T * k / E), at most T
    (64, 8, 2, 1.0),
    (64, 8, 2, 1.25),
    (100, 8, 1, 1.0),
    (10, 4, 2, 1.5),
    (10, 4, 2, 100.0),
    (10, 4, 2, None),
    (7, 16, 1, 0.5),
]


@pytest.mark.points(2)
def test_expert_capacity_is_the_ceiling_of_factor_times_even_share(submission):
    capacity_of = submission.function("expert_capacity")
    for case in CAPACITY_CASES:
        got, expected = capacity_of(*case), capacity(*case)
        assert got == expected, f"expert_capacity{case} returned {got!r}, expected {expected}"


@pytest.mark.points(1)
def test_expert_capacity_rejects_a_non_positive_factor(submission):
    expect_exception("ValueError", lambda: submission.function("expert_capacity")(64, 8, 2, 0.0))


def _routing(tokens: int, experts: int, k: int, *salt: object) -> torch.Tensor:
    """Random distinct experts per token, skewed so that some experts overflow."""
    gen = generator("ids", *salt)
    skew = torch.linspace(2.0, 0.0, experts, dtype=torch.float64)
    scores = skew + torch.rand(tokens, experts, generator=gen, dtype=torch.float64)
    return torch.sort(scores, dim=-1, descending=True, stable=True).indices[:, :k]


DISPATCH_CASES = [
    # (name, tokens, experts, k, capacity)
    ("k1-overflow", 40, 4, 1, 6),
    ("k2-second-choices-wait", 40, 6, 2, 9),
    ("k2-no-dropping", 30, 4, 2, 30),
]


@pytest.mark.points(3)
@pytest.mark.parametrize(("name", "tokens", "experts", "k", "cap"), DISPATCH_CASES, ids=[c[0] for c in DISPATCH_CASES])
def test_dispatch_keeps_the_first_tokens_in_priority_order_and_drops_the_rest(
    submission, name, tokens, experts, k, cap
):
    """GShard policy: first choices before second, batch order within; buffers hold exactly the
    kept tokens at their slots, zeros elsewhere, and never more than `capacity` rows."""
    x = torch.randn(tokens, 5, generator=generator("dispatch", name), dtype=torch.float64)
    ids = _routing(tokens, experts, k, name)
    buffers, slots = submission.function("dispatch")(x, ids, experts, cap)
    expected_slots = priority_slots(ids, experts, cap)
    assert_matches(slots, expected_slots, f"{name}: slots (-1 = dropped), GShard priority order")
    expected = torch.zeros(experts, cap, 5, dtype=x.dtype)
    for t, j in zip(*torch.nonzero(expected_slots >= 0, as_tuple=True)):
        expected[ids[t, j], expected_slots[t, j]] = x[t]
    assert_matches(buffers, expected, f"{name}: expert buffers (experts, capacity, d)")


@pytest.mark.points(4)
def test_combine_unpermutes_weights_and_gives_zeros_to_fully_dropped_tokens(submission):
    tokens, experts, k, cap = 40, 4, 2, 7
    ids = _routing(tokens, experts, k, "combine")
    slots = priority_slots(ids, experts, cap)
    assert bool((slots < 0).all(dim=1).any()), "grader bug: the case must drop some token entirely"
    outputs = torch.randn(experts, cap, 6, generator=generator("combine-out"), dtype=torch.float64)
    weights = torch.rand(tokens, k, generator=generator("combine-w"), dtype=torch.float64)
    y = submission.function("combine")(outputs, ids, weights, slots)
    expected = torch.zeros(tokens, 6, dtype=torch.float64)
    for t, j in zip(*torch.nonzero(slots >= 0, as_tuple=True)):
        expected[t] += weights[t, j] * outputs[ids[t, j], slots[t, j]]
    assert_matches(y, expected, "combine: sum over kept choices of weight * expert output", 1e-12, 1e-12)


@pytest.mark.points(2)
@pytest.mark.parametrize("k", [1, 2], ids=["k1", "k2"])
def test_load_balancing_loss_matches_mixtral(submission, k):
    """E * sum_e f_e P_e with f counted over all k choices (Mixtral's load_balancing_loss_func)."""
    logits = _logits(83, 8, torch.float64, "balance", k)
    ids = mixtral_route(logits, k)[1]
    got = submission.function("load_balancing_loss")(logits, ids, 8)
    assert_matches(got, mixtral_load_balancing_loss(logits, ids, 8), f"load_balancing_loss (k={k})", 1e-10, 1e-12)


@pytest.mark.points(1)
def test_load_balancing_loss_counts_zero_for_an_expert_no_choice_went_to(submission):
    """E = 6 (not a power of two), k = 3, 7 tokens, and the last expert never chosen: f_e = 0
    for it, its P_e still computed over all E experts (a count sized by the largest id seen,
    bincount without minlength, has 5 entries, not 6)."""
    logits = _logits(7, 6, torch.float64, "balance-idle-expert")
    logits[:, 5] -= 30.0  # expert 5 is never among a token's 3 most probable
    ids = mixtral_route(logits, 3)[1]
    assert not bool((ids == 5).any()), "grader bug: expert 5 must get no choice"
    got = submission.function("load_balancing_loss")(logits, ids, 6)
    assert_matches(
        got,
        mixtral_load_balancing_loss(logits, ids, 6),
        "load_balancing_loss with 6 experts, k=3, expert 5 chosen by no token (its f_e is 0)",
        1e-10,
        1e-12,
    )


@pytest.mark.points(1)
def test_load_balancing_loss_of_a_perfectly_even_router_is_k(submission):
    """Uniform probabilities and every expert chosen equally often: f_e = k/E, P_e = 1/E."""
    ids = torch.arange(16).view(8, 2) % 4
    got = submission.function("load_balancing_loss")(torch.zeros(8, 4, dtype=torch.float64), ids, 4)
    assert_matches(got, torch.tensor(2.0, dtype=torch.float64), "balancing loss of an even router with k=2")


@pytest.mark.points(2)
def test_router_z_loss_matches_st_moe(submission):
    """mean over tokens of logsumexp(logits)^2 (ST-MoE, eq. 5)."""
    logits = _logits(61, 8, torch.float64, "z") + 3
    got = submission.function("router_z_loss")(logits)
    assert_matches(got, z_loss(logits), "router_z_loss", 1e-12, 1e-12)
