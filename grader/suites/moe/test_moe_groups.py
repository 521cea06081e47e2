"""Hidden suite: expert parallelism in a group that is not the world. In a world of 4, ranks
{1, 3} shard one MoE layer's experts between them and ranks {0, 2} another layer's, at once,
each pair on its own tokens (the layout of expert parallelism inside data parallelism: the
expert-parallel group is the ranks sharing one layer's experts). Group rank r owns experts
r*E/p ... (r+1)*E/p - 1, p the size of the group.

Each pair's outputs and gradients must equal one process's (the loop-over-experts layer of
reference.py on the pair's tokens together). A submission that exchanges over the world group
mixes the two layers' tokens; one that takes the global rank for the group rank owns the wrong
experts. Bytes per rank, counted by the kernel over forward and backward, are held to the rows
routed across the pair (each sent once forward and once backward) and the counts exchange, plus
the slack of grader/perf.py (it covers the few hundred bytes of building the groups).

Both checks read one world-of-4 call, run once per submission. Below them: a world of 5 whose
groups of 3 and 2 ({0, 2, 3} and {1, 4}: neither contiguous nor strided) shard two layers of 6
experts with k = 3.
"""

from __future__ import annotations

import pytest
import torch

from grader.perf import with_slack
from grader.sandbox import Group, Saved, Step
from grader.suites.moe.reference import make_params, reference_grads
from grader.suites.moe.test_moe_perf import _payload_rows
from grader.testing import assert_matches, generator

TOL = (1e-9, 1e-10)
D_MODEL, D_FF, EXPERTS, K = 16, 24, 8, 2
GROUPS = ((1, 3), (0, 2))  # global ranks; group rank i is the i-th
SIZES = (40, 27)  # tokens of group rank 0 and 1: uneven splits everywhere

RUNS: dict[int, tuple] = {}


def group_data(ranks: tuple[int, ...]):
    gen = generator("ep-groups", ranks)
    params = make_params(D_MODEL, D_FF, EXPERTS, 1, gen, torch.float64)
    xs = [torch.randn(n, D_MODEL, generator=gen, dtype=torch.float64) for n in SIZES]
    gs = [torch.randn(n, D_MODEL, generator=gen, dtype=torch.float64) for n in SIZES]
    return params, xs, gs


def run_in_groups(submission):
    """Every global rank's expert_parallel_forward_backward result, and the call's bytes."""
    if id(submission) not in RUNS:
        steps = [None] * 4
        for ranks in GROUPS:
            params, xs, gs = group_data(ranks)
            for rank, x, g in zip(ranks, xs, gs):
                steps[rank] = [
                    Step("MoELayer", (D_MODEL, D_FF, EXPERTS, K, None, 1), save_as="layer", send_back=False),
                    Step("layer.double", send_back=False),
                    Step("layer.load_state_dict", (params,), send_back=False),
                    Step("shard_experts", (Saved("layer"), Group(ranks)), save_as="shard", send_back=False),
                    Step("expert_parallel_forward_backward", (Saved("shard"), x, g, Group(ranks))),
                ]
        RUNS[id(submission)] = submission.script_spmd(4, steps)
    return RUNS[id(submission)]


@pytest.mark.points(4)
def test_moe_experts_sharded_in_two_groups_of_a_world_of_4_match_one_process_each(submission):
    result = run_in_groups(submission)
    local = EXPERTS // 2
    for ranks in GROUPS:
        other = GROUPS[1 - GROUPS.index(ranks)]
        where = f"experts sharded over the group {list(ranks)} of a world of 4 (ranks {list(other)} ran another layer)"
        params, xs, gs = group_data(ranks)
        y, x_grad, grads = reference_grads(params, torch.cat(xs), torch.cat(gs), K, None)
        got = [result.steps[rank][-1] for rank in ranks]
        for r, (part, part_grad) in enumerate(zip(y.split(SIZES), x_grad.split(SIZES))):
            assert_matches(got[r]["y"], part, f"{where}: group rank {r}'s output for its tokens", *TOL)
            assert_matches(got[r]["x_grad"], part_grad, f"{where}: group rank {r}'s gradient of its x", *TOL)
            for name in ("w_gate", "w_up", "w_down"):
                expected = grads[name][r * local : (r + 1) * local]
                assert_matches(
                    got[r]["grads"][name],
                    expected,
                    f"{where}: group rank {r}'s experts' {name} gradient (group rank r owns experts "
                    f"r*E/p ... (r+1)*E/p - 1, r = dist.get_rank(group), p = dist.get_world_size(group))",
                    *TOL,
                )
        for name, expected in grads.items():
            if not name.startswith("w_"):
                total = sum(rank["grads"][name] for rank in got)
                assert_matches(total, expected, f"{where}: {name} gradient summed over the group", *TOL)


@pytest.mark.perf
@pytest.mark.points(2)
def test_moe_experts_sharded_in_groups_send_only_rows_routed_across_the_group(submission, device, record_property):
    result = run_in_groups(submission)
    if not any(result.bytes_sent) and device == "cuda":
        pytest.skip("no bytes were counted: NCCL moves data where the kernel does not count it")
    bounds = [0] * 4
    for ranks in GROUPS:
        params, xs, _ = group_data(ranks)
        for rank, rows in zip(ranks, _payload_rows(params, xs, K)):
            # rows of float64 forward and their gradients backward; one int64 per (rank, local expert)
            bounds[rank] = 2 * rows * D_MODEL * 8 + EXPERTS * 8
    record_property("bytes_sent_per_rank", result.bytes_sent)
    record_property("payload_bytes_per_rank", bounds)
    for rank, (sent, bound) in enumerate(zip(result.bytes_sent, bounds)):
        assert sent <= with_slack(bound), (
            f"rank {rank} sent {sent:,} bytes; the rows routed across its group, forward and backward, and the "
            f"counts come to {bound:,} bytes (+ slack: {int(with_slack(bound)):,}): exchange within `group` only, "
            f"each choice's row to the group rank owning its expert"
        )


# ------------------------------------------------------------------ groups of different sizes

# A world of 5: ranks {0, 2, 3} shard one layer's 6 experts (2 per rank) while ranks {1, 4} shard
# another layer's 6 (3 per rank), at once. Neither group is ranks 0..p-1, a contiguous block or
# evenly strided (the world-of-4 layout above is: global // 2 gives its group ranks), p = 3 is
# not a power of two, k = 3 choices of 6 experts, and one rank has a single token.
UNEVEN_WORLD = 5
UNEVEN_GROUPS = ((0, 2, 3), (1, 4))  # global ranks; group rank i is the i-th
UNEVEN_EXPERTS, UNEVEN_K, UNEVEN_D, UNEVEN_FF = 6, 3, 8, 12
UNEVEN_SIZES = {3: (11, 1, 7), 2: (9, 5)}  # tokens per group rank
UNEVEN_RUNS: dict[int, object] = {}


def uneven_group_data(ranks: tuple[int, ...]):
    gen = generator("ep-uneven-groups", ranks)
    shared = len(ranks) == 2  # the pair's layer has a shared expert, the trio's none
    params = make_params(UNEVEN_D, UNEVEN_FF, UNEVEN_EXPERTS, int(shared), gen, torch.float64)
    sizes = UNEVEN_SIZES[len(ranks)]
    xs = [torch.randn(n, UNEVEN_D, generator=gen, dtype=torch.float64) for n in sizes]
    gs = [torch.randn(n, UNEVEN_D, generator=gen, dtype=torch.float64) for n in sizes]
    return params, int(shared), sizes, xs, gs


def run_in_uneven_groups(submission):
    if id(submission) not in UNEVEN_RUNS:
        steps = [None] * UNEVEN_WORLD
        for ranks in UNEVEN_GROUPS:
            params, shared, _, xs, gs = uneven_group_data(ranks)
            layer = (UNEVEN_D, UNEVEN_FF, UNEVEN_EXPERTS, UNEVEN_K, None, shared)
            for rank, x, g in zip(ranks, xs, gs):
                steps[rank] = [
                    Step("MoELayer", layer, save_as="layer", send_back=False),
                    Step("layer.double", send_back=False),
                    Step("layer.load_state_dict", (params,), send_back=False),
                    Step("shard_experts", (Saved("layer"), Group(ranks)), save_as="shard", send_back=False),
                    Step("expert_parallel_forward_backward", (Saved("shard"), x, g, Group(ranks))),
                ]
        UNEVEN_RUNS[id(submission)] = submission.script_spmd(UNEVEN_WORLD, steps)
    return UNEVEN_RUNS[id(submission)]


@pytest.mark.points(2)
def test_moe_experts_sharded_in_groups_of_3_and_2_of_a_world_of_5_match_one_process_each(submission):
    result = run_in_uneven_groups(submission)
    for ranks in UNEVEN_GROUPS:
        p = len(ranks)
        local = UNEVEN_EXPERTS // p
        other = UNEVEN_GROUPS[1 - UNEVEN_GROUPS.index(ranks)]
        where = (
            f"{UNEVEN_EXPERTS} experts (k={UNEVEN_K}) sharded over the group {list(ranks)} of a world of 5 "
            f"(ranks {list(other)} ran another layer)"
        )
        params, _, sizes, xs, gs = uneven_group_data(ranks)
        y, x_grad, grads = reference_grads(params, torch.cat(xs), torch.cat(gs), UNEVEN_K, None)
        got = [result.steps[rank][-1] for rank in ranks]
        for r, (rank, part, part_grad) in enumerate(zip(ranks, y.split(sizes), x_grad.split(sizes))):
            who = f"global rank {rank} (group rank {r}, {sizes[r]} tokens)"
            assert_matches(got[r]["y"], part, f"{where}: {who}'s output for its tokens", *TOL)
            assert_matches(got[r]["x_grad"], part_grad, f"{where}: {who}'s gradient of its x", *TOL)
            for name in ("w_gate", "w_up", "w_down"):
                assert_matches(
                    got[r]["grads"][name],
                    grads[name][r * local : (r + 1) * local],
                    f"{where}: {who}'s experts' {name} gradient (group rank r owns experts {r * local} ... "
                    f"{(r + 1) * local - 1}: r*E/p ... (r+1)*E/p - 1, p = {p}; every split list of "
                    f"dist.all_to_all_single(..., group=group) is indexed by group rank)",
                    *TOL,
                )
        for name, expected in grads.items():
            if not name.startswith("w_"):
                total = sum(rank["grads"][name] for rank in got)
                assert_matches(total, expected, f"{where}: {name} gradient summed over the group", *TOL)
