"""Hidden suite: comm_volume against reference.traffic (the step's calls counted one by one),
and the planner's cost model term by term: each fixed case makes the other terms vanish or
differ, so that every term of plan_memory and step_seconds is seen on its own; plan against a
brute-force search over every grid; Llama 3 405B's published grid (TP 8, CP 1, PP 16, DP 128 on
16,384 H100s of 80 GB; Dubey et al. 2024, table 4) fits."""

from __future__ import annotations

import math

import pytest

from grader.models.transformer_config import TransformerConfig
from grader.sandbox import Step
from grader.suites.parallel_4d.reference import (
    CONFIG,
    KINDS,
    expected_groups,
    memory_terms,
    runnable,
    time_terms,
    traffic,
)
from grader.testing import expect_exception

VOLUME_CASES = [  # (dp, tp, pp, cp), batch, seq, microbatches
    ((2, 2, 2, 1), 4, 8, 2),
    ((2, 2, 1, 2), 4, 8, 2),
    ((1, 2, 2, 2), 8, 8, 4),
    ((2, 1, 2, 2), 4, 8, 1),
    ((1, 1, 4, 1), 8, 4, 8),
    ((1, 4, 1, 1), 2, 4, 1),
    ((1, 1, 1, 4), 2, 8, 2),
    ((1, 1, 1, 1), 2, 8, 2),
]
LLAMA3_405B = TransformerConfig(
    num_layers=126, d_model=16384, num_heads=128, num_kv_heads=8, d_ff=53248, vocab_size=128256, gated_mlp=True
)
H100_CLUSTER = dict(
    gpus=16384, gpus_per_node=8, memory_bytes=80e9, peak_flops=989e12, nvlink_bandwidth=450e9,
    network_bandwidth=50e9, mfu=0.4,
)  # fmt: skip
SMALL = TransformerConfig(num_layers=8, d_model=1024, num_heads=16, num_kv_heads=4, d_ff=4096, vocab_size=32000)
SMALL_CLUSTER = dict(
    gpus=16, gpus_per_node=4, memory_bytes=4e8, peak_flops=1e14, nvlink_bandwidth=2e11,
    network_bandwidth=1e10, mfu=0.5,
)  # fmt: skip


def close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-6)


@pytest.mark.points(8)
def test_comm_volume_equals_the_calls_of_the_step_counted_one_by_one(submission):
    steps = []
    for mesh, batch, seq, m in VOLUME_CASES:
        sizes = dict(zip(("dp", "tp", "pp", "cp"), mesh))
        world = math.prod(mesh)
        steps.append(
            Step(
                "volume_step", (CONFIG, sizes, "tp-cp-dp-pp", expected_groups(sizes), list(range(world)), batch, seq, m)
            )
        )
    answers = submission.script(steps).steps[0]
    for (mesh, batch, seq, m), ranks in zip(VOLUME_CASES, answers):
        sizes = dict(zip(("dp", "tp", "pp", "cp"), mesh))
        for rank, got in enumerate(ranks):
            want = traffic(CONFIG, sizes, rank, batch, seq, m)
            assert set(got) == set(KINDS), f"comm_volume must key every kind of GROUP_KINDS, got {sorted(got)}"
            for kind in KINDS:
                assert close(got[kind], want[kind]), (
                    f"comm_volume for {sizes}, batch {batch}, seq_len {seq}, {m} micro-batches, rank {rank}: "
                    f"{kind!r} expected {want[kind]:.1f} bytes, got {got[kind]!r}"
                )


@pytest.mark.points(2)
@pytest.mark.parametrize("batch, seq, m", [(4, 8, 3), (6, 8, 2), (4, 7, 2)], ids=["m", "dp", "cp"])
def test_comm_volume_refuses_a_batch_that_does_not_split(submission, batch, seq, m):
    sizes = {"dp": 2, "tp": 1, "pp": 1, "cp": 2}
    step = Step("volume_step", (CONFIG, sizes, "tp-cp-dp-pp", expected_groups(sizes), [0], batch, seq, m))
    expect_exception("ValueError", lambda: submission.script([step]))


MEMORY_CASES = [  # (tp, cp, pp, dp, global_batch, seq_len): each isolates a term
    (1, 1, 1, 1, 1, 2048),  # everything on one GPU
    (1, 1, 1, 8, 8, 2048),  # ZeRO-1 shards the optimizer over dp only
    (1, 4, 1, 2, 8, 2048),  # ... and over cp, which also cuts the layer inputs
    (4, 1, 1, 1, 4, 2048),  # tp divides the state and the activations
    (1, 1, 4, 1, 16, 2048),  # pp: 2 of 8 layers, 4 micro-batches in flight
    (1, 1, 4, 4, 8, 2048),  # pp 4 but only 2 micro-batches: min(pp, B/dp)
    (1, 1, 3, 1, 6, 2048),  # ceil(8 / 3) = 3 layers on the first stage
    (1, 1, 4, 3, 8, 2048),  # dp 3 does not divide B 8: min(pp, 8 // 3) = 2 micro-batches held, not 8/3
]


@pytest.mark.points(8)
def test_plan_memory_counts_each_term_of_its_docstring(submission):
    steps = [Step("plan_memory", (SMALL, *case)) for case in MEMORY_CASES]
    for case, got in zip(MEMORY_CASES, submission.script(steps).steps[0]):
        terms = memory_terms(SMALL, *case)
        want = sum(terms.values())
        shown = ", ".join(f"{k} {v:.4g}" for k, v in terms.items())
        assert close(got, want), (
            f"plan_memory(tp, cp, pp, dp, B, s = {case}): expected {want:.6g} ({shown}), got {got!r}"
        )


TIME_GRIDS = [(1, 1, 1, 16), (4, 1, 1, 4), (8, 1, 1, 2), (1, 4, 1, 4), (2, 4, 1, 2), (1, 1, 2, 8), (1, 1, 4, 4),
              (2, 2, 2, 2), (1, 16, 1, 1), (1, 1, 16, 1)]  # fmt: skip


@pytest.mark.points(8)
def test_step_seconds_counts_each_term_at_the_bandwidth_of_where_the_group_lies(submission):
    """SMALL on 16 GPUs, 4 per node: tp 4 stays inside a node, tp 8 crosses it; cp inside when
    tp * cp divides 4; dp and pp spans as the docstring says."""
    # and a batch of 36 on dp = 8, which does not divide it: m = 36 // 8 = 4 micro-batches, not 4.5
    runs = [(TIME_GRIDS, 32), ([(1, 1, 2, 8)], 36)]
    answers = submission.script([Step("seconds_step", (SMALL, SMALL_CLUSTER, grids, b, 2048)) for grids, b in runs])
    for (grids, batch), got_all in zip(runs, answers.steps[0]):
        for grid, got in zip(grids, got_all):
            terms = time_terms(SMALL, SMALL_CLUSTER, *grid, batch, 2048)
            want = sum(terms.values())
            shown = ", ".join(f"{k} {v:.4g} s" for k, v in terms.items())
            assert close(got, want), (
                f"step_seconds(tp, cp, pp, dp = {grid}, global_batch = {batch}): expected {want:.6g} s ({shown}; "
                f"m = global_batch // dp = {batch // grid[3]}), got {got!r}"
            )


ONE_NODE = {**SMALL_CLUSTER, "gpus": 8, "gpus_per_node": 8, "memory_bytes": 1e12}  # every grid fits
# (tp, cp, pp, dp) = (1, 1, 1, 16) on SMALL_CLUSTER needs exactly this (every term an integer):
# 4.75 P of model state, one layer input kept per layer, one layer recomputed.
EXACT_LIMIT = 4.75 * 120848384 + 8 * 2 * 2048 * 1024 + 34 * 2048 * 1024


@pytest.mark.points(8)
@pytest.mark.parametrize(
    "cluster", [SMALL_CLUSTER, ONE_NODE, {**SMALL_CLUSTER, "memory_bytes": EXACT_LIMIT}],
    ids=["16-gpus-400-mb", "one-node-of-8", "16-gpus-at-the-exact-limit"],
)  # fmt: skip
def test_plan_lists_every_grid_that_fits_fastest_first_as_a_brute_force_search_does(submission, cluster):
    """The exact limit fits (plan_memory <= memory_bytes); one node of 8 lists grids with cp = 8,
    pp = 8 and dp = 8 (a dimension as large as the cluster)."""
    batch, seq = 32, 2048
    got = submission.script([Step("plan_step", (SMALL, cluster, batch, seq))]).steps[0][0]
    want = []
    for grid in runnable(SMALL, cluster, batch, seq):
        memory = sum(memory_terms(SMALL, *grid, batch, seq).values())
        if memory <= cluster["memory_bytes"]:
            want.append((sum(time_terms(SMALL, cluster, *grid, batch, seq).values()), grid, memory))
    want.sort(key=lambda w: (w[0], *w[1]))
    got_grids = [(p["tp"], p["cp"], p["pp"], p["dp"]) for p in got]
    assert got_grids == [w[1] for w in want], (
        f"plan on {cluster['gpus']} GPUs ({cluster['gpus_per_node']} per node, {cluster['memory_bytes']:.6g} bytes "
        f"each): expected the grids {[w[1] for w in want]} in this order, "
        f"got {got_grids}"
    )
    if cluster is SMALL_CLUSTER:
        assert len(want) < len(runnable(SMALL, cluster, batch, seq)), "the case must leave some grids out for memory"
    if cluster["memory_bytes"] == EXACT_LIMIT:
        assert (1, 1, 1, 16) in [w[1] for w in want], "the exact-limit case must keep the grid that needs it"
    for plan, (seconds, grid, memory) in zip(got, want):
        assert plan["microbatches"] == batch // grid[3], f"plan {grid}: microbatches {plan['microbatches']}"
        assert close(plan["memory_bytes"], memory) and close(plan["step_seconds"], seconds), (
            f"plan {grid}: expected memory {memory:.6g} and {seconds:.6g} s, got {plan['memory_bytes']!r}, "
            f"{plan['step_seconds']!r}"
        )


@pytest.mark.points(2)
def test_plan_refuses_a_model_that_fits_nowhere(submission):
    cluster = {**SMALL_CLUSTER, "memory_bytes": 1e8}
    expect_exception("ValueError", lambda: submission.script([Step("plan_step", (SMALL, cluster, 32, 2048))]))


@pytest.mark.points(4)
def test_llama3_405b_on_16384_h100s_fits_with_the_papers_grid(submission):
    """TP 8 (one node), CP 1, PP 16, DP 128, 2,048 sequences of 8,192 tokens: within 80 GB by
    plan_memory; and plan's every grid keeps tp inside a node of 8."""
    got = submission.script([Step("plan_memory", (LLAMA3_405B, 8, 1, 16, 128, 2048, 8192))]).steps[0][0]
    want = sum(memory_terms(LLAMA3_405B, 8, 1, 16, 128, 2048, 8192).values())
    assert close(got, want), f"plan_memory of Llama 3 405B at TP 8, PP 16, DP 128: expected {want:.6g}, got {got!r}"
    assert got <= 80e9
    plans = submission.script([Step("plan_step", (LLAMA3_405B, H100_CLUSTER, 2048, 8192))]).steps[0][0]
    assert plans and all(8 % p["tp"] == 0 for p in plans), "every grid of plan must keep tp inside a node of 8"
    assert any((p["tp"], p["cp"], p["pp"], p["dp"]) == (8, 1, 16, 128) for p in plans), (
        "the paper's grid must be listed"
    )
