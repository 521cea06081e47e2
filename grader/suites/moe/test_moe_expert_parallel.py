"""Hidden suite: expert parallelism on gloo worlds of 2 and 4 ranks gives what one process
gives on all ranks' tokens together: the reference is autograd through the loop-over-experts
layer of grader/suites/moe/reference.py on the concatenated tokens. Rank r owns experts
r*E/p ... (r+1)*E/p - 1; router and shared-expert gradients are per rank and sum to the whole."""

from __future__ import annotations

import pytest
import torch

from grader.sandbox import Saved, Step
from grader.suites.moe.reference import make_params, reference_grads
from grader.testing import assert_matches, generator

TOL = (1e-9, 1e-10)
D_MODEL, D_FF, EXPERTS, K = 16, 24, 8, 2


def rank_steps(params: dict[str, torch.Tensor], shared: int, x: torch.Tensor, grad_output: torch.Tensor) -> list[Step]:
    return [
        Step("MoELayer", (D_MODEL, D_FF, EXPERTS, K, None, shared), save_as="layer", send_back=False),
        Step("layer.double", send_back=False),
        Step("layer.load_state_dict", (params,), send_back=False),
        Step("shard_experts", (Saved("layer"),), save_as="shard", send_back=False),
        # A forward alone first, so that a missing expert_parallel_forward is named as such.
        Step("expert_parallel_forward", (Saved("shard"), x), send_back=False),
        Step("expert_parallel_forward_backward", (Saved("shard"), x, grad_output)),
    ]


@pytest.mark.points(6)
@pytest.mark.parametrize(("world_size", "shared"), [(2, 1), (4, 0)], ids=["world=2-shared", "world=4"])
def test_expert_parallel_matches_the_single_process_layer_with_gradients(submission, world_size, shared):
    gen = generator("ep", world_size)
    params = make_params(D_MODEL, D_FF, EXPERTS, shared, gen, torch.float64)
    # Uneven batches per rank (one rank has a single token): the split sizes differ everywhere.
    sizes = [1 + 13 * r for r in range(world_size)]
    xs = [torch.randn(n, D_MODEL, generator=gen, dtype=torch.float64) for n in sizes]
    gs = [torch.randn(n, D_MODEL, generator=gen, dtype=torch.float64) for n in sizes]
    steps = [rank_steps(params, shared, x, g) for x, g in zip(xs, gs)]
    got = [rank[-1] for rank in submission.script_spmd(world_size, steps).steps]
    y, x_grad, grads = reference_grads(params, torch.cat(xs), torch.cat(gs), K, None)
    local = EXPERTS // world_size
    for r, (part, part_grad) in enumerate(zip(y.split(sizes), x_grad.split(sizes))):
        assert_matches(got[r]["y"], part, f"world={world_size}, rank {r}: output for its tokens", *TOL)
        assert_matches(got[r]["x_grad"], part_grad, f"world={world_size}, rank {r}: gradient of its x", *TOL)
        for name in ("w_gate", "w_up", "w_down"):
            expected = grads[name][r * local : (r + 1) * local]
            assert_matches(
                got[r]["grads"][name], expected, f"world={world_size}, rank {r}: gradient of its experts' {name}", *TOL
            )
    for name, expected in grads.items():
        if not name.startswith("w_"):
            total = sum(rank["grads"][name] for rank in got)
            assert_matches(total, expected, f"world={world_size}: {name} gradient summed over ranks", *TOL)


@pytest.mark.points(2)
def test_expert_parallel_with_a_rank_that_receives_no_token(submission):
    """A router that sends every choice to rank 0's experts: rank 1 receives no row, runs its
    experts on nothing, sends nothing back, and its experts' gradients are zero; both ranks'
    outputs and gradients still equal the single-process layer's (world of 2, float64)."""
    gen = generator("ep-idle-rank")
    params = make_params(D_MODEL, D_FF, EXPERTS, 0, gen, torch.float64)
    local = EXPERTS // 2
    params["router.weight"][:local, 0] = 5.0  # feature 0 is 10 in every token: logits ~ +50 ...
    params["router.weight"][local:, 0] = -5.0  # ... for rank 0's experts, ~ -50 for rank 1's
    sizes = [6, 5]
    xs = [torch.randn(n, D_MODEL, generator=gen, dtype=torch.float64) for n in sizes]
    for x in xs:
        x[:, 0] = 10.0
    gs = [torch.randn(n, D_MODEL, generator=gen, dtype=torch.float64) for n in sizes]
    got = [rank[-1] for rank in submission.script_spmd(2, [rank_steps(params, 0, x, g) for x, g in zip(xs, gs)]).steps]
    y, x_grad, grads = reference_grads(params, torch.cat(xs), torch.cat(gs), K, None)
    for r, (part, part_grad) in enumerate(zip(y.split(sizes), x_grad.split(sizes))):
        what = "rank 1 receives no token (every choice goes to rank 0's experts)"
        assert_matches(got[r]["y"], part, f"{what}: rank {r}'s output for its tokens", *TOL)
        assert_matches(got[r]["x_grad"], part_grad, f"{what}: rank {r}'s gradient of its x", *TOL)
        for name in ("w_gate", "w_up", "w_down"):
            expected = grads[name][r * local : (r + 1) * local]
            assert_matches(got[r]["grads"][name], expected, f"{what}: rank {r}'s experts' {name} gradient", *TOL)
