"""Public tests for the moe module: run them while you work with

    pytest assignments/moe                  (add -s to see what your code prints)
    pytest assignments/moe -k dispatch --no-timeout   (to use breakpoint())

Your functions run in worker processes, never inside pytest; MoELayer is built in a worker and
driven step by step (grader.sandbox.Step). The hidden suite checks many more cases against a
loop-over-experts reference and Mixtral's formulas, gradients (also through expert
parallelism, on 2 and 4 ranks and in process groups), and performance (operator counts, bytes
sent, time); `make grade` gives the score.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from grader.sandbox import Group, Saved, Step
from grader.testing import assert_matches, expect_exception, generator


def test_topk_route_keeps_the_k_most_probable_experts_renormalised(submission):
    logits = torch.log(torch.tensor([[0.1, 0.5, 0.15, 0.25], [0.4, 0.1, 0.1, 0.4]]))
    weights, ids = submission.function("topk_route")(logits, 2)
    assert_matches(ids, torch.tensor([[1, 3], [0, 3]]), "expert_ids (ties go to the lower index)")
    assert_matches(weights, torch.tensor([[0.5 / 0.75, 0.25 / 0.75], [0.5, 0.5]]), "weights", 1e-6, 1e-6)


def test_topk_route_rejects_k_larger_than_the_number_of_experts(submission):
    expect_exception("ValueError", lambda: submission.function("topk_route")(torch.zeros(3, 4), 5))


def test_expert_capacity_rounds_the_even_share_up(submission):
    capacity = submission.function("expert_capacity")
    assert capacity(10, 4, 2, 1.0) == 5  # ceil(1.0 * 10 * 2 / 4)
    assert capacity(10, 4, 1, 1.25) == 4  # ceil(3.125)
    assert capacity(10, 4, 2, None) == 10  # no dropping


def test_dispatch_gives_first_choices_priority_and_drops_the_overflow(submission):
    """The docstring's example, and one more token: capacity 1, k=2."""
    x = torch.tensor([[1.0, 1.0], [2.0, 2.0], [3.0, 3.0]])
    ids = torch.tensor([[0, 1], [1, 0], [1, 2]])
    buffers, slots = submission.function("dispatch")(x, ids, 3, 1)
    # First choices in batch order: token 0 -> expert 0 slot 0, token 1 -> expert 1 slot 0,
    # token 2 -> expert 1 is full. Second choices: experts 1 and 0 are full, expert 2 takes token 2.
    assert_matches(slots, torch.tensor([[0, -1], [0, -1], [-1, 0]]), "slots")
    assert_matches(buffers, torch.tensor([[[1.0, 1.0]], [[2.0, 2.0]], [[3.0, 3.0]]]), "expert buffers (3, 1, 2)")


def test_combine_undoes_dispatch_and_weights_the_outputs(submission):
    x = torch.randn(6, 4, generator=generator("public-combine"), dtype=torch.float64)
    ids = torch.tensor([[0, 1], [1, 2], [2, 0], [0, 2], [1, 0], [2, 1]])
    weights = torch.tensor(
        [[0.75, 0.25], [0.625, 0.375], [0.5, 0.5], [0.875, 0.125], [1.0, 0.0], [0.5, 0.5]], dtype=torch.float64
    )
    buffers, slots = submission.function("dispatch")(x, ids, 3, 6)
    # Identity experts: combine must give back sum_j weights[t, j] * x[t] = x[t].
    y = submission.function("combine")(buffers, ids, weights, slots)
    assert_matches(y, x, "combine(dispatch(x)) with identity experts and weights summing to 1", 1e-12, 1e-12)


def test_load_balancing_loss_of_an_even_router_is_k(submission):
    ids = torch.tensor([[0, 1], [2, 3], [1, 0], [3, 2]])
    got = submission.function("load_balancing_loss")(torch.zeros(4, 4), ids, 4)
    assert got.item() == pytest.approx(2.0), "E * sum_e f_e P_e with f_e = 2/4 and P_e = 1/4 is k = 2"


def test_router_z_loss_of_zero_logits_is_log_e_squared(submission):
    got = submission.function("router_z_loss")(torch.zeros(5, 8))
    assert got.item() == pytest.approx(math.log(8) ** 2)


def _swiglu(x, w_gate, w_up, w_down):
    return (F.silu(x @ w_gate) * (x @ w_up)) @ w_down


def test_moe_layer_with_one_expert_per_token_matches_a_loop_over_tokens(submission):
    """k=1, dropless: y[t] = FFN_e(x[t]) of the token's expert, weight 1."""
    torch.manual_seed(0)
    layer_args = (8, 16, 4, 1, None, 0)
    params = {
        "router.weight": torch.randn(4, 8),
        "w_gate": torch.randn(4, 8, 16) / 8**0.5,
        "w_up": torch.randn(4, 8, 16) / 8**0.5,
        "w_down": torch.randn(4, 16, 8) / 4,
    }
    x = torch.randn(2, 10, 8)
    steps = [
        Step("MoELayer", layer_args, save_as="layer", send_back=False),
        Step("layer.load_state_dict", (params,), send_back=False),
        Step("layer.forward", (x,)),
    ]
    y, aux = submission.script(steps).steps[0][-1]
    tokens = x.reshape(-1, 8)
    experts = (tokens @ params["router.weight"].t()).argmax(dim=-1)
    rows = [_swiglu(tokens[t], *(params[n][experts[t]] for n in ("w_gate", "w_up", "w_down"))) for t in range(20)]
    assert_matches(y, torch.stack(rows).view_as(x), "MoELayer output", 1e-5, 1e-5)
    assert_matches(aux["tokens_per_expert"], torch.bincount(experts, minlength=4), "aux['tokens_per_expert']")


def test_moe_layer_forward_runs_as_many_operations_for_8x_the_tokens(submission):
    """The operator count (a TorchDispatchMode in the worker) must not grow with the tokens."""
    steps = [
        Step("MoELayer", (16, 32, 4, 2, 1.25, 1), save_as="layer", send_back=False),
        Step("layer.forward", (torch.randn(32, 16),), send_back=False, measure=("ops",)),
        Step("layer.forward", (torch.randn(256, 16),), send_back=False, measure=("ops",)),
    ]
    figures = submission.script(steps).measurements[0]
    assert figures[1]["ops"] == figures[2]["ops"], (
        f"{figures[1]['ops']} operations on 32 tokens, {figures[2]['ops']} on 256"
    )


def test_expert_parallel_on_two_ranks_matches_the_whole_layer(submission):
    torch.manual_seed(1)
    layer_args = (8, 16, 4, 2, None, 0)
    params = {
        "router.weight": torch.randn(4, 8),
        "w_gate": torch.randn(4, 8, 16) / 8**0.5,
        "w_up": torch.randn(4, 8, 16) / 8**0.5,
        "w_down": torch.randn(4, 16, 8) / 4,
    }
    xs = [torch.randn(12, 8), torch.randn(5, 8)]
    whole = [
        Step("MoELayer", layer_args, save_as="layer", send_back=False),
        Step("layer.load_state_dict", (params,), send_back=False),
    ]
    expected, _ = submission.script([*whole, Step("layer.forward", (torch.cat(xs),))]).steps[0][-1]
    steps = [
        [
            *whole,
            Step("shard_experts", (Saved("layer"),), save_as="shard", send_back=False),
            Step("expert_parallel_forward", (Saved("shard"), x)),
        ]
        for x in xs
    ]
    outputs = [rank[-1] for rank in submission.script_spmd(2, steps).steps]
    for rank, (got, part) in enumerate(zip(outputs, expected.split([12, 5]))):
        assert_matches(got, part, f"rank {rank}: output for its tokens vs MoELayer on all tokens", 1e-5, 1e-5)


# A world of 4 ranks split into expert-parallel groups, by global rank (group rank i is the i-th):
# the whole world shares one layer's 8 experts (2 each), or two pairs each share their own
# layer's (4 each), at the same time, each pair on its own tokens.
LAYOUTS = {"world-of-4": ((0, 1, 2, 3),), "pairs-0-2-and-1-3": ((0, 2), (1, 3))}
D_MODEL, D_FF, EXPERTS, K = 8, 12, 8, 2
TOKENS = (9, 4, 12, 6)  # tokens of global ranks 0..3: every rank a different number


def random_experts(gen: torch.Generator) -> dict[str, torch.Tensor]:
    """A MoELayer(D_MODEL, D_FF, EXPERTS, K) state dict in float64."""
    return {
        "router.weight": torch.randn(EXPERTS, D_MODEL, generator=gen, dtype=torch.float64),
        "w_gate": torch.randn(EXPERTS, D_MODEL, D_FF, generator=gen, dtype=torch.float64) / D_MODEL**0.5,
        "w_up": torch.randn(EXPERTS, D_MODEL, D_FF, generator=gen, dtype=torch.float64) / D_MODEL**0.5,
        "w_down": torch.randn(EXPERTS, D_FF, D_MODEL, generator=gen, dtype=torch.float64) / D_FF**0.5,
    }


def moe_by_loop_over_tokens(params: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """The dropless layer token by token: softmax of the router logits, the K most probable
    experts with their probabilities renormalised to sum to 1, the weighted sum of their SwiGLUs."""
    probs = torch.softmax(x @ params["router.weight"].t(), dim=-1)
    top, experts = probs.topk(K, dim=-1)
    weights = top / top.sum(dim=-1, keepdim=True)
    rows = []
    for t in range(x.shape[0]):
        ffns = [_swiglu(x[t], params["w_gate"][e], params["w_up"][e], params["w_down"][e]) for e in experts[t]]
        rows.append(sum(w * ffn for w, ffn in zip(weights[t], ffns)))
    return torch.stack(rows)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_expert_parallel_on_4_ranks_matches_a_loop_over_tokens_in_each_group(submission, layout: str):
    groups = LAYOUTS[layout]
    steps: dict[int, list[Step]] = {}
    expected: dict[int, torch.Tensor] = {}
    for ranks in groups:
        group = Group(ranks) if len(ranks) < 4 else None  # None: the whole world
        gen = generator("public-ep", layout, ranks)
        params = random_experts(gen)
        for rank in ranks:
            x = torch.randn(TOKENS[rank], D_MODEL, generator=gen, dtype=torch.float64)
            expected[rank] = moe_by_loop_over_tokens(params, x)
            steps[rank] = [
                Step("MoELayer", (D_MODEL, D_FF, EXPERTS, K, None, 0), save_as="layer", send_back=False),
                Step("layer.double", send_back=False),
                Step("layer.load_state_dict", (params,), send_back=False),
                Step("shard_experts", (Saved("layer"), group), save_as="shard", send_back=False),
                Step("expert_parallel_forward", (Saved("shard"), x, group)),
            ]
    result = submission.script_spmd(4, [steps[rank] for rank in range(4)])
    for ranks in groups:
        p, local = len(ranks), EXPERTS // len(ranks)
        shown = "group=None, the whole world" if p == 4 else f"group={list(ranks)}, beside the other pair"
        for group_rank, rank in enumerate(ranks):
            assert_matches(
                result.steps[rank][-1],
                expected[rank],
                f"expert_parallel_forward on a world of 4 ({shown}): global rank {rank}'s output for its "
                f"{TOKENS[rank]} tokens vs a loop over tokens; group rank {group_rank} owns experts "
                f"{group_rank * local}..{(group_rank + 1) * local - 1} (split sizes of all_to_all_single are "
                f"indexed by group rank, p = dist.get_world_size(group), group=group on every exchange)",
                1e-9,
                1e-10,
            )
