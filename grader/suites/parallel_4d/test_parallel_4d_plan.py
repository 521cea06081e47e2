"""Hidden suite: comm_volume against reference.traffic (the step's calls counted one by one),
and the planner's cost model term by term: each fixed case makes the other terms vanish or
differ, so that every term of plan_memory and step_seconds is seen on its own; plan against a
brute-force search over every grid; Llama 3 405B's published grid (TP 8, CP 1, PP 16, DP 128 on
16,384 H100s of 80 GB; Dubey et al. 2024, table 4) fits."""

from __future__ import annotations

import itertools
import math

import pytest

from grader.models.transformer_config import TransformerConfig
from grader.sandbox import Step
from grader.suites.parallel_4d.reference import (
    CONFIG,
    CONFIG_3,
    CONFIG_L3,
    KINDS,
    expected_groups,
    memory_terms,
    runnable,
    schedules,
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
# Sizes that are not powers of two, each with a model they split (pp = 3: 3 layers; tp = cp = 3:
# 3 KV heads, 18 vocabulary rows, 6 positions), every rank asked in reverse order: comm_volume
# answers for the rank it is given.
VOLUME_CASES_3 = [  # (dp, tp, pp, cp), batch, seq, microbatches, config
    ((2, 1, 3, 2), 12, 8, 3, CONFIG_L3),
    ((2, 2, 3, 2), 12, 8, 2, CONFIG_L3),
    ((1, 3, 1, 3), 6, 6, 2, CONFIG_3),
    ((3, 3, 1, 1), 6, 6, 1, CONFIG_3),
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
    """Eight meshes of 1 to 8 ranks on CONFIG, every rank in order; then meshes of 6 to 24 ranks
    with pp = 3, tp = 3, cp = 3 or dp = 3, every rank in reverse order."""
    cases = [(*case, CONFIG, False) for case in VOLUME_CASES] + [(*case, True) for case in VOLUME_CASES_3]
    steps = []
    for mesh, batch, seq, m, config, backwards in cases:
        sizes = dict(zip(("dp", "tp", "pp", "cp"), mesh))
        ranks = list(range(math.prod(mesh)))[:: -1 if backwards else 1]
        groups = expected_groups(sizes)
        steps.append(Step("volume_step", (config, sizes, "tp-cp-dp-pp", groups, ranks, batch, seq, m)))
    answers = submission.script(steps).steps[0]
    for (mesh, batch, seq, m, config, backwards), answer in zip(cases, answers):
        sizes = dict(zip(("dp", "tp", "pp", "cp"), mesh))
        ranks = list(range(math.prod(mesh)))[:: -1 if backwards else 1]
        for rank, got in zip(ranks, answer):
            want = traffic(config, sizes, rank, batch, seq, m)
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
# Spans that are not powers of two, where "inside a node" as "the span divides gpus_per_node"
# (the docstring) and as "the span <= gpus_per_node" differ: on nodes of 8, a group of 6 (or 3)
# consecutive ranks starting at rank 6 (or 3) crosses into the next node; on nodes of 6, a span of
# 4 starting at rank 4 does. TWELVE has 12 heads and 12 KV heads, so tp may be 3, 4 or 6.
TWELVE = TransformerConfig(num_layers=6, d_model=768, num_heads=12, num_kv_heads=12, d_ff=3072, vocab_size=32000)
TWELVE_GPUS_ON_NODES_OF_8 = dict(
    gpus=12, gpus_per_node=8, memory_bytes=1e12, peak_flops=1e14, nvlink_bandwidth=2e11,
    network_bandwidth=1e10, mfu=0.5,
)  # fmt: skip
TWELVE_GPUS_ON_NODES_OF_6 = {**TWELVE_GPUS_ON_NODES_OF_8, "gpus_per_node": 6}
SPAN_GRIDS = {  # cluster name -> (cluster, grids (tp, cp, pp, dp)): each has a span <= the node that does not divide it
    "nodes of 8": (TWELVE_GPUS_ON_NODES_OF_8, [
        (2, 3, 1, 2),  # cp spans 6: across
        (2, 1, 2, 3),  # dp-cp spans 6: across
        (1, 3, 2, 2),  # cp spans 3, dp-cp 6: across
        (3, 1, 1, 4),  # tp spans 3: across
        (6, 1, 1, 2),  # tp spans 6: across
        (4, 1, 3, 1),  # tp spans 4: inside; pp 12: across
    ]),
    "nodes of 6": (TWELVE_GPUS_ON_NODES_OF_6, [
        (4, 1, 1, 3),  # tp spans 4: across
        (2, 2, 1, 3),  # cp spans 4: across
        (1, 4, 3, 1),  # cp spans 4: across
        (3, 2, 2, 1),  # tp 3, cp 6, dp-cp 6: inside; pp 12: across
        (6, 1, 2, 1),  # tp spans 6: inside
        (1, 2, 1, 6),  # cp spans 2: inside; dp-cp 12: across
    ]),
}  # fmt: skip


@pytest.mark.points(8)
def test_step_seconds_counts_each_term_at_the_bandwidth_of_where_the_group_lies(submission):
    """SMALL on 16 GPUs, 4 per node: tp 4 stays inside a node, tp 8 crosses it; cp inside when
    tp * cp divides 4; dp and pp spans as the docstring says. TWELVE on 12 GPUs, nodes of 8 and
    of 6: spans of 3, 4 and 6 that fit in a node's size without dividing it go at
    network_bandwidth; spans of 2, 3 and 6 that divide 6 at nvlink_bandwidth."""
    # and a batch of 36 on dp = 8, which does not divide it: m = 36 // 8 = 4 micro-batches, not 4.5
    runs = [(SMALL, SMALL_CLUSTER, TIME_GRIDS, 32, 2048), (SMALL, SMALL_CLUSTER, [(1, 1, 2, 8)], 36, 2048)]
    runs += [(TWELVE, cluster, grids, 24, 3072) for cluster, grids in SPAN_GRIDS.values()]
    steps = [Step("seconds_step", (cfg, cluster, grids, b, seq)) for cfg, cluster, grids, b, seq in runs]
    for (cfg, cluster, grids, batch, seq), got_all in zip(runs, submission.script(steps).steps[0]):
        for grid, got in zip(grids, got_all):
            terms = time_terms(cfg, cluster, *grid, batch, seq)
            want = sum(terms.values())
            shown = ", ".join(f"{k} {v:.4g} s" for k, v in terms.items())
            assert close(got, want), (
                f"step_seconds(tp, cp, pp, dp = {grid}, global_batch = {batch}) on {cluster['gpus']} GPUs, "
                f"{cluster['gpus_per_node']} per node: expected {want:.6g} s ({shown}; m = global_batch // dp = "
                f"{batch // grid[3]}; a group lies inside a node when its span (tp, tp*cp, tp*cp*dp, every rank) "
                f"divides gpus_per_node), got {got!r}"
            )


ONE_NODE = {**SMALL_CLUSTER, "gpus": 8, "gpus_per_node": 8, "memory_bytes": 1e12}  # every grid fits
# (tp, cp, pp, dp) = (1, 1, 1, 16) on SMALL_CLUSTER needs exactly this (every term an integer):
# 4.75 P of model state, one layer input kept per layer, one layer recomputed.
EXACT_LIMIT = 4.75 * 120848384 + 8 * 2 * 2048 * 1024 + 34 * 2048 * 1024
PLAN_CASES = {  # id -> (cfg, cluster, global_batch, seq_len)
    "16-gpus-400-mb": (SMALL, SMALL_CLUSTER, 32, 2048),
    "one-node-of-8": (SMALL, ONE_NODE, 32, 2048),
    "16-gpus-at-the-exact-limit": (SMALL, {**SMALL_CLUSTER, "memory_bytes": EXACT_LIMIT}, 32, 2048),
    # tp 3 and 6 (<= 8, not dividing it) may not run; cp 3, 6, 12 do not divide 2048; dp 3 and 6 give
    # dp-cp spans of 3, 6 and 12
    "12-gpus-on-nodes-of-8": (TWELVE, TWELVE_GPUS_ON_NODES_OF_8, 24, 2048),
    # tp 4 (<= 6, not dividing it) may not run; pp 4 (<= 6 layers, not dividing them) may, pp 12 not
    "12-gpus-on-nodes-of-6": (TWELVE, TWELVE_GPUS_ON_NODES_OF_6, 24, 3072),
}


def brute_force(cfg, cluster: dict, batch: int, seq: int, **options) -> list[tuple]:
    """(step_seconds, grid, plan_memory, m, v, r, every schedule that fits) of every grid plan's
    docstring lets run, each with its fastest schedule (the first of the fastest in plan's order),
    fastest first, ties in increasing (tp, cp, pp, dp). Every schedule that fits: (m, v, the
    fewest r) -> (seconds, memory)."""
    want = []
    for grid in runnable(cfg, cluster, batch, seq):
        found = schedules(cfg, cluster, grid, batch, seq, **options)
        if found:
            seconds, m, v, r, memory = min(found, key=lambda f: f[0])
            want.append((seconds, grid, memory, m, v, r, {f[1:4]: (f[0], f[4]) for f in found}))
    return sorted(want, key=lambda w: (w[0], *w[1]))


def check_plans(got: list[dict], want: list[tuple], where: str) -> None:
    """plan's list against brute_force's: the same grids, schedules, memory and seconds, in order."""
    got_grids, want_grids = [(p["tp"], p["cp"], p["pp"], p["dp"]) for p in got], [w[1] for w in want]
    missing, extra = sorted(set(want_grids) - set(got_grids)), sorted(set(got_grids) - set(want_grids))
    wrong = ([f"{missing} can run and are missing"] if missing else []) + (
        [f"{extra} are listed but may not run"] if extra else []
    )
    assert not wrong, (
        f"{where}: the grids (tp, cp, pp, dp) {'; '.join(wrong)} (a grid runs when tp divides gpus_per_node, "
        "num_heads and num_kv_heads; cp divides seq_len; pp <= num_layers; dp divides global_batch; and some "
        "schedule fits: plan_memory <= memory_bytes)"
    )
    by_grid = {w[1]: w for w in want}
    for plan, grid in zip(got, got_grids):
        fastest, _, _, m, v, r, fitting = by_grid[grid]
        schedule = (plan["microbatches"], plan["virtual_stages"], plan["recomputed_layers"])
        # a schedule as fast to 1e-9 is as good: v * m alike may tie in one order of arithmetic only
        seconds, memory = fitting.get(schedule, (math.inf, math.nan))
        assert seconds <= fastest * (1 + 1e-9) and all(type(x) is int for x in schedule), (
            f"{where}: plan {grid}: expected the schedule (microbatches, virtual_stages, recomputed_layers) = "
            f"{(m, v, r)} ({fastest!r} s; ints; the fastest of every m and v, each with the fewest recomputed layers "
            f"that fit, ties to the smaller m, then v), got {schedule!r}"
            + (f" ({seconds!r} s)" if seconds < math.inf else " (not one that fits with the fewest layers recomputed)")
        )
        assert close(plan["memory_bytes"], memory) and close(plan["step_seconds"], seconds), (
            f"{where}: plan {grid} with (m, v, r) = {(m, v, r)}: expected memory {memory:.6g} bytes and "
            f"{seconds:.6g} s (plan_memory and step_seconds of their docstrings), got {plan['memory_bytes']!r} and "
            f"{plan['step_seconds']!r}"
        )
    # Fastest first. Grids whose times agree to 1e-9 may come in either order here: the same sum
    # in another order of arithmetic may differ in its last bit (exact ties have their own test).
    for i, (a, b) in enumerate(itertools.pairwise(got_grids)):
        if by_grid[a][0] > by_grid[b][0] * (1 + 1e-9):
            raise AssertionError(
                f"{where}: grid {i} of the list is {a} ({by_grid[a][0]!r} s) but grid {i + 1} is {b}, faster "
                f"({by_grid[b][0]!r} s): fastest first"
            )


@pytest.mark.points(8)
@pytest.mark.parametrize("case", list(PLAN_CASES), ids=list(PLAN_CASES))
def test_plan_lists_every_grid_that_fits_fastest_first_as_a_brute_force_search_does(submission, case):
    """The exact limit fits (plan_memory <= memory_bytes); one node of 8 lists grids with cp = 8,
    pp = 8 and dp = 8 (a dimension as large as the cluster); on 12 GPUs, tp must divide the
    node's size (8 or 6), not merely fit in it, and pp need only be <= num_layers."""
    cfg, cluster, batch, seq = PLAN_CASES[case]
    got = submission.script([Step("plan_step", (cfg, cluster, batch, seq))]).steps[0][0]
    want = brute_force(cfg, cluster, batch, seq)
    where = (
        f"plan on {cluster['gpus']} GPUs ({cluster['gpus_per_node']} per node, {cluster['memory_bytes']:.6g} bytes "
        f"each), batch {batch}, seq_len {seq}"
    )
    check_plans(got, want, where)
    want_grids = [w[1] for w in want]
    if case == "16-gpus-400-mb":
        assert len(want) < len(runnable(cfg, cluster, batch, seq)), "the case must leave some grids out for memory"
    if case == "16-gpus-at-the-exact-limit":
        assert (1, 1, 1, 16) in want_grids, "the exact-limit case must keep the grid that needs it"


# Links of infinite bandwidth: no group's bytes take any time, so grids with the same compute and
# bubble take exactly the same step_seconds, in any order of arithmetic: every grid with pp = 1 (no
# bubble), and those with the same pp and dp.
FREE_LINKS = {**ONE_NODE, "nvlink_bandwidth": math.inf, "network_bandwidth": math.inf}


@pytest.mark.points(4)
def test_plan_lists_grids_of_exactly_equal_step_time_in_increasing_tp_cp_pp_dp(submission):
    """SMALL on one node of 8 with free links: the nine grids with pp = 1, and each set of grids
    that share pp and dp, tie exactly; plan lists each set in increasing (tp, cp, pp, dp), which
    is neither the order of their memory (it falls as tp grows) nor that of a loop over dp first."""
    batch, seq = 32, 2048
    want = brute_force(SMALL, FREE_LINKS, batch, seq)
    ties: dict[float, list] = {}
    for seconds, grid, memory, *_ in want:
        ties.setdefault(seconds, []).append((grid, memory))
    got = submission.script([Step("plan_step", (SMALL, FREE_LINKS, batch, seq))]).steps[0][0]
    pp_1 = [(p["tp"], p["cp"], p["dp"], p["microbatches"]) for p in got if p["pp"] == 1]
    largest = max(ties.values(), key=len)
    assert len(largest) >= 3 and sorted(largest, key=lambda t: t[1]) != largest, "suite error: the case has no tie"
    got_grids = [(p["tp"], p["cp"], p["pp"], p["dp"]) for p in got]
    assert sorted(got_grids) == sorted(w[1] for w in want), (
        f"plan on one node of 8 with free links: expected the grids {sorted(w[1] for w in want)} (in some "
        f"order), got {sorted(got_grids)}"
    )
    for seconds, tied in ties.items():
        grids = [grid for grid, _ in tied]
        order = [grid for grid in got_grids if grid in grids]
        assert order == grids, (
            f"plan on one node of 8 with free links: the grids {grids} all take exactly {seconds!r} s (the same "
            f"compute and bubble, no time in communication); ties go in increasing (tp, cp, pp, dp): expected "
            f"them in the order {grids}, got {order} (memory of each: "
            f"{ {grid: f'{memory:.4g}' for grid, memory in tied} })"
        )
    assert got_grids == [w[1] for w in want], f"plan: expected the order {[w[1] for w in want]}, got {got_grids}"
    # with pp = 1 and free links no term depends on m: every micro-batch count ties, exactly
    assert pp_1 and all(m == 1 for *_, m in pp_1), (
        "plan on one node of 8 with free links: with pp = 1 every micro-batch count takes the same time; ties go "
        f"to the smaller m: expected microbatches = 1 for each (tp, cp, dp), got (tp, cp, dp, microbatches) {pp_1}"
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


# Schedules (m, v, r) and the optimizer's sharding, on grids where each term is seen on its own.
# SMALL has 8 layers: pp 2 holds 4 a stage (v in 1, 2, 4), pp 3 holds 3 (v in 1, 3), pp 4 holds 2.
SCHEDULE_MEMORY_CASES = [  # (tp, cp, pp, dp, B, s), (m, v, r, sharded_optimizer)
    ((1, 1, 2, 2, 16, 2048), (8, 1, None, True)),  # the defaults written out: m = 16 // 2
    ((1, 1, 2, 2, 16, 2048), (2, 1, 4, True)),  # 4 sequences a micro-batch
    ((1, 1, 2, 2, 16, 2048), (8, 2, 4, True)),  # interleaved: min(8 * 2, 3 * 2 - 1) = 5 chunks of 2 layers
    ((1, 1, 2, 2, 16, 2048), (2, 4, 4, True)),  # interleaved with few micro-batches: min(2 * 4, 9) = 8 chunks
    ((2, 2, 3, 1, 12, 2048), (4, 3, 0, True)),  # nothing recomputed: 34 bytes each, no recomputing layer
    ((2, 2, 3, 1, 12, 2048), (6, 1, 2, True)),  # 2 of 3 layers recomputed
    ((1, 2, 4, 2, 8, 2048), (4, 2, 1, True)),  # pp 4, 2 layers, 1 recomputed, v 2
    ((1, 2, 4, 2, 8, 2048), (1, 1, 2, False)),  # the Adam state held whole
    ((1, 1, 1, 3, 8, 2048), (2, 1, 3, False)),  # dp 3 does not divide 8: 8 // 3 = 2 sequences
]


@pytest.mark.points(6)
def test_plan_memory_of_a_schedule_counts_its_micro_batches_chunks_recomputed_layers_and_optimizer(submission):
    steps = [Step("plan_memory", (SMALL, *grid, *schedule)) for grid, schedule in SCHEDULE_MEMORY_CASES]
    for (grid, schedule), got in zip(SCHEDULE_MEMORY_CASES, submission.script(steps).steps[0]):
        terms = memory_terms(SMALL, *grid, *schedule)
        want = sum(terms.values())
        shown = ", ".join(f"{k} {v:.4g}" for k, v in terms.items())
        assert close(got, want), (
            f"plan_memory(tp, cp, pp, dp, B, s = {grid}, microbatches, virtual_stages, recomputed_layers, "
            f"sharded_optimizer = {schedule}): expected {want:.6g} ({shown}), got {got!r}"
        )


# A cluster whose HBM limits small matmuls (matmul_efficiency below mfu), and whose network is slow
# enough that the data-parallel collectives show past what overlap hides.
HBM_CLUSTER = {**SMALL_CLUSTER, "memory_bandwidth": 2e11}
SCHEDULE_TIME_CASES = [  # grid (tp, cp, pp, dp), B, s, schedule keywords
    ((1, 1, 4, 4), 32, 2048, dict(microbatches=8, virtual_stages=2)),  # the bubble over v * m, pp bytes * v
    ((1, 1, 4, 4), 32, 2048, dict(microbatches=2, virtual_stages=1, recomputed_layers=1)),  # 4 sequences each
    ((2, 2, 2, 2), 32, 2048, dict(microbatches=4, virtual_stages=4, recomputed_layers=0)),  # 4 l collectives
    ((4, 1, 2, 2), 32, 2048, dict(microbatches=16, recomputed_layers=3)),  # 4 l + 2 r = 22 a micro-batch
    ((1, 1, 1, 16), 32, 2048, dict(microbatches=1)),  # dp hidden: one micro-batch of 2 sequences
    ((1, 1, 1, 16), 32, 2048, dict(microbatches=2, sharded_optimizer=False)),  # one all-reduce, partly hidden
    ((1, 4, 1, 4), 32, 2048, dict(microbatches=8, recomputed_layers=5)),  # cp, 5 of 8 recomputed
    ((1, 1, 3, 2), 24, 3072, dict(microbatches=4, virtual_stages=3)),  # pp 3: 3 layers a stage, v 3
]


@pytest.mark.points(6)
@pytest.mark.parametrize("cluster", ["flat efficiency", "HBM-bound small matmuls"])
def test_step_seconds_of_a_schedule_counts_interleaving_recomputation_overlap_and_efficiency(submission, cluster):
    """Each schedule keyword moves its own terms: v divides the bubble and multiplies the pp bytes;
    r adds 2 P / l FLOPs per layer recomputed and 2 collectives; m and b set the micro-batch the
    overlap hides the data-parallel collectives behind; with memory_bandwidth, matmul_efficiency
    (given) of b * s rows sets the compute rate, not mfu alone."""
    where = SMALL_CLUSTER if cluster == "flat efficiency" else HBM_CLUSTER
    steps = [Step("seconds_step", (SMALL, where, [grid], b, s), options) for grid, b, s, options in SCHEDULE_TIME_CASES]
    exposed_somewhere = False
    for (grid, b, s, options), [got] in zip(SCHEDULE_TIME_CASES, submission.script(steps).steps[0]):
        terms = time_terms(SMALL, where, *grid, b, s, **options)
        exposed_somewhere |= terms["dp (exposed)"] > 0
        want = sum(terms.values())
        shown = ", ".join(f"{k} {v:.4g} s" for k, v in terms.items())
        assert close(got, want), (
            f"step_seconds(tp, cp, pp, dp = {grid}, global_batch = {b}, seq_len = {s}, {options}) on "
            f"{where['gpus']} GPUs, memory_bandwidth {where.get('memory_bandwidth', math.inf):g}: expected "
            f"{want:.6g} s ({shown}), got {got!r}"
        )
    assert exposed_somewhere, "suite error: no case leaves data-parallel time exposed"


@pytest.mark.points(4)
@pytest.mark.parametrize(
    "call",
    [
        ("plan_memory", (1, 1, 2, 2, 16, 2048, 3)),  # 3 micro-batches of 8 sequences
        ("plan_memory", (1, 1, 2, 2, 16, 2048, 0)),
        ("plan_memory", (1, 1, 2, 2, 16, 2048, 8, 3)),  # v 3 does not divide 4 layers
        ("plan_memory", (1, 1, 1, 2, 16, 2048, 8, 2)),  # v 2 with pp 1
        ("plan_memory", (1, 1, 2, 2, 16, 2048, 8, 1, 5)),  # r 5 of 4 layers
        ("plan_memory", (1, 1, 2, 2, 16, 2048, 8, 1, -1)),
        ("step_seconds", (1, 1, 3, 2, 12, 2048, 4)),  # 4 does not divide 6
        ("step_seconds", (1, 1, 3, 2, 12, 2048, 6, 2)),  # v 2 does not divide 3 layers
        ("step_seconds", (1, 1, 3, 2, 12, 2048, 6, 1, 4)),  # r 4 of 3 layers
    ],
    ids=lambda call: f"{call[0]}{call[1]}",
)
def test_a_schedule_that_does_not_split_the_batch_or_the_stage_is_refused(submission, call):
    name, args = call
    if name == "plan_memory":
        expect_exception("ValueError", lambda: submission.script([Step(name, (SMALL, *args))]))
    else:
        grid, b, s, schedule = args[:4], args[4], args[5], args[6:]
        options = dict(zip(("microbatches", "virtual_stages", "recomputed_layers"), schedule))
        step = Step("seconds_step", (SMALL, SMALL_CLUSTER, [grid], b, s), options)
        expect_exception("ValueError", lambda: submission.script([step]))


# 16 GPUs of 300 MB: the fastest schedules differ from grid to grid (several micro-batch counts,
# interleaving where pp > 1, some layers recomputed where the rest would not fit).
TIGHT = {**HBM_CLUSTER, "memory_bytes": 3e8}


@pytest.mark.points(6)
@pytest.mark.parametrize(
    "options", [{}, {"full_recompute": True}, {"sharded_optimizer": False}], ids=["any", "full", "replicated"]
)
def test_plan_keeps_each_grids_fastest_schedule_with_the_fewest_recomputed_layers_that_fit(submission, options):
    want = brute_force(SMALL, TIGHT, 32, 2048, **options)
    schedules_used = {w[3:6] for w in want}
    assert options or (len({s[0] for s in schedules_used}) > 1 and len({s[1] for s in schedules_used}) > 1), (
        f"suite error: the case must need several m and v, got {schedules_used}"
    )
    got = submission.script([Step("plan_step", (SMALL, TIGHT, 32, 2048), options)]).steps[0][0]
    check_plans(got, want, f"plan on 16 GPUs of 300 MB, 4 per node, batch 32, seq_len 2048, {options or 'no options'}")
