"""Public tests for the parallel_4d module: run them while you work with

    pytest assignments/parallel_4d            (add -s to see what each rank prints)

Your functions run in worker processes, one per rank, joined by torch.distributed (gloo). The
hidden suite checks more: rank_grid against Megatron-Core's RankGenerator in every order, one
step against one process on meshes of 6 to 24 ranks (three pipeline stages, groups of three, and
a world where no two kinds of group have the same members), the micro-batches 1F1B runs and
holds, the bytes each of your groups carries (every call counted), and each term of the
planner's cost model on nodes and spans that are not powers of two, ties included; `make grade`
gives the score.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch
import torch.nn.functional as F

from grader.models.tiny_gpt import TinyGPT, TinyGPTConfig
from grader.models.transformer_config import TransformerConfig
from grader.sandbox import Group, Step
from grader.testing import expect_exception

CONFIG = TinyGPTConfig(vocab_size=16, max_seq_len=8, num_layers=2, d_model=16, num_heads=4, num_kv_heads=2, mlp_ratio=2)


def test_rank_grid_of_8_ranks_is_the_module_docstrings_example(submission):
    grid = submission.function("grid_step")(8, tp=2, cp=1, pp=2, dp=2)
    want = {
        "tp": [[0, 1], [2, 3], [4, 5], [6, 7]],
        "dp": [[0, 2], [1, 3], [4, 6], [5, 7]],
        "pp": [[0, 4], [1, 5], [2, 6], [3, 7]],
    }
    want["dp-cp"] = want["dp"]  # cp = 1
    want["embedding"] = want["pp"]  # the first and last rank of each pp group of 2
    for kind, groups in want.items():
        got = grid["groups"].get(kind)
        assert got == groups, f"rank_grid(8, tp=2, cp=1, pp=2, dp=2): groups[{kind!r}]: expected {groups}, got {got}"


def test_rank_grid_refuses_sizes_whose_product_is_not_the_world(submission):
    expect_exception("ValueError", lambda: submission.function("rank_grid")(8, 2, 2, 2, 2))


def test_one_step_on_tp_2_and_pp_2_equals_one_process(submission):
    tokens = torch.randint(0, 16, (4, 9), generator=torch.Generator().manual_seed(0))
    sizes = {"tp": 2, "cp": 1, "pp": 2, "dp": 1}
    result = submission.function("step_4d").spmd(4, [(CONFIG, sizes, "tp-cp-dp-pp", tokens, 2, 0.1, 0)] * 4)
    model = TinyGPT.from_seed(CONFIG, 0, torch.float64)
    loss = F.cross_entropy(model(tokens[:, :-1]).reshape(-1, 16), tokens[:, 1:].reshape(-1))
    loss.backward()
    for rank, out in enumerate(result.outputs):
        stage, t = rank // 2, rank % 2  # order tp-cp-dp-pp: tp changes fastest
        assert (out["loss"] is None) == (stage == 0), f"rank {rank}: the loss only on the last stage"
        if stage == 1:
            assert math.isclose(out["loss"], loss.item(), rel_tol=1e-12), (out["loss"], loss.item())
        query = out["state"][f"blocks.{stage}.attention.query.weight"]
        whole = model.blocks[stage].attention.query
        want = (whole.weight - 0.1 * whole.weight.grad).detach().chunk(2, 0)[t]
        torch.testing.assert_close(query, want, rtol=1e-10, atol=1e-10, msg=f"rank {rank}: query weight shard")


def test_vocab_parallel_loss_in_two_pairs_of_a_world_of_4(submission):
    """Ranks {0, 2} and {1, 3} each split a vocabulary of 6 (3 ids a rank) and get F.cross_entropy
    of their own pair's logits: the loss communicates only within its group."""
    gen = torch.Generator().manual_seed(1)
    targets = torch.tensor([0, 5, 2, 3])
    logits = {pair: torch.randn(4, 6, generator=gen, dtype=torch.float64) for pair in ((0, 2), (1, 3))}
    args = []
    for rank in range(4):
        pair = (0, 2) if rank % 2 == 0 else (1, 3)
        position = pair.index(rank)
        args.append((logits[pair].chunk(2, dim=-1)[position].contiguous(), targets, 3 * position, Group(pair)))
    got = submission.function("vocab_parallel_cross_entropy").spmd(4, args).outputs
    for rank, losses in enumerate(got):
        want = F.cross_entropy(logits[(0, 2) if rank % 2 == 0 else (1, 3)], targets, reduction="none")
        torch.testing.assert_close(losses, want, rtol=1e-12, atol=1e-12, msg=f"rank {rank}: per-token losses")


def test_comm_volume_of_tensor_parallelism_alone(submission):
    sizes = {"tp": 2, "cp": 1, "pp": 1, "dp": 1}
    groups = submission.function("grid_step")(2, tp=2, cp=1, pp=1, dp=1)["groups"]
    volume = submission.function("volume_step")(CONFIG, sizes, "tp-cp-dp-pp", groups, [0], 2, 8, 1)[0]
    # 4 all-reduces per block, 1 for the embedding, 1 into the head: 2 * 4 + 2 = 10 of b*s*d = 256
    # float64 elements, each sending 2(p-1)/p = 1 of it; plus 3 of the loss's b*s = 16.
    assert volume["tp"] == 10 * 256 * 8 + 3 * 16 * 8
    assert volume["pp"] == volume["cp"] == volume["dp-cp"] == volume["embedding"] == 0


SMALL = TransformerConfig(num_layers=2, d_model=64, num_heads=4, num_kv_heads=4, d_ff=256, vocab_size=100)
SMALL_PARAMS = 2 * (4 * 64 * 64 + 2 * 64 * 256) + 100 * 64  # P of plan_memory's docstring


def test_plan_memory_on_one_gpu_is_16_bytes_a_parameter_plus_activations(submission):
    cfg, params = SMALL, SMALL_PARAMS
    memory = submission.function("plan_memory")(cfg, 1, 1, 1, 1, 1, 128)
    assert math.isclose(memory, 16 * params + 2 * 2 * 128 * 64 + 34 * 128 * 64), memory


def cluster(gpus: int, gpus_per_node: int, memory_bytes: float = 1e12) -> dict[str, float]:
    """A Cluster's fields (plan.py), for the given helpers seconds_step and plan_step."""
    return {
        "gpus": gpus,
        "gpus_per_node": gpus_per_node,
        "memory_bytes": memory_bytes,
        "peak_flops": 1e12,
        "nvlink_bandwidth": 1e11,
        "network_bandwidth": 1e9,
        "mfu": 0.5,
    }


def test_step_seconds_of_2_data_parallel_gpus_hides_the_reduce_scatter_but_not_all_the_all_gather(submission):
    """dp = 2 alone, m = 2 micro-batches of one sequence: no bubble and no tp, cp or pp traffic.
    ZeRO-1's reduce-scatter and all-gather of P bf16 elements send (p-1)/p * 2P = P bytes each;
    across two nodes of 1 GPU (1 GB/s) the reduce-scatter hides behind the last micro-batch's
    backward (2/3 of its compute), the all-gather only partly behind the first one's forward (1/3)."""
    batch, seq, m = 4, 128, 2
    per_token = 8 * SMALL_PARAMS + 8 * seq * 4 * 16 * 2  # (6 + 2) P, plus causal attention's 4 passes
    compute = per_token * batch * seq / (2 * 1e12 * 0.5)  # 2 GPUs at 50 % of peak
    cases = {"one node of 2": (cluster(2, 2), 1e11), "two nodes of 1": (cluster(2, 1), 1e9)}
    steps = [Step("seconds_step", (SMALL, c, [(1, 1, 1, 2)], batch, seq)) for c, _ in cases.values()]
    for (where, (_, bandwidth)), [got] in zip(cases.items(), submission.script(steps).steps[0]):
        one_pass = SMALL_PARAMS / bandwidth  # a reduce-scatter or an all-gather
        exposed = max(0.0, one_pass - 2 / 3 * compute / m) + max(0.0, one_pass - 1 / 3 * compute / m)
        want = compute + exposed
        assert math.isclose(got, want, rel_tol=1e-9), (
            f"step_seconds(tp=1, cp=1, pp=1, dp=2) on {where}: expected {want:.6g} s ({compute:.6g} s of compute + "
            f"{exposed:.6g} s of the data-parallel collectives left exposed), got {got!r}"
        )


def test_plan_lists_every_grid_that_fits_fastest_first(submission):
    """4 GPUs, 2 per node, 850 kB each: plan must list exactly the grids (tp, cp, pp, dp) that
    pass the docstring's rules and fit (with one sequence per micro-batch, v = 1 and every layer
    recomputed: the least memory a schedule can take), sorted by step_seconds; each plan's
    memory and seconds are plan_memory's and step_seconds' for its own schedule, which is no
    slower than that least-memory one."""
    gpus, per_node, limit, batch, seq = 4, 2, 850e3, 4, 128
    divisors = [n for n in range(1, gpus + 1) if gpus % n == 0]
    # every (tp, cp, pp, dp) of 4 GPUs that can run by plan's docstring, memory aside
    grids: list[tuple[int, int, int, int]] = []
    for tp, cp, pp in itertools.product(divisors, repeat=3):
        dp = gpus // (tp * cp * pp)
        if tp * cp * pp * dp != gpus:
            continue
        tp_fits = per_node % tp == 0 and SMALL.num_heads % tp == 0 and SMALL.num_kv_heads % tp == 0
        if tp_fits and seq % cp == 0 and pp <= SMALL.num_layers and batch % dp == 0:
            grids.append((tp, cp, pp, dp))
    where = cluster(gpus, per_node, limit)
    steps = [Step("plan_memory", (SMALL, *grid, batch, seq)) for grid in grids]
    steps.append(Step("seconds_step", (SMALL, where, grids, batch, seq)))
    steps.append(Step("plan_step", (SMALL, where, batch, seq)))
    *memories, seconds, plans = submission.script(steps).steps[0]
    fits = {grid: time for grid, memory, time in zip(grids, memories, seconds) if memory <= limit}
    got = [(p["tp"], p["cp"], p["pp"], p["dp"]) for p in plans]
    assert sorted(got) == sorted(fits), (
        f"plan on {gpus} GPUs ({per_node} per node, {limit:g} bytes each): expected the grids (tp, cp, pp, dp) "
        f"{sorted(fits)} (every grid that can run and fits), got {sorted(got)}"
    )
    times = [p["step_seconds"] for p in plans]
    assert times == sorted(times), f"plan: expected fastest first, got step_seconds {times}"
    schedules = [(p["microbatches"], p["virtual_stages"], p["recomputed_layers"]) for p in plans]
    steps = [Step("plan_memory", (SMALL, *grid, batch, seq, *schedule)) for grid, schedule in zip(got, schedules)]
    steps += [
        Step("seconds_step", (SMALL, where, [grid], batch, seq), dict(zip(SCHEDULE_KEYWORDS, schedule)))
        for grid, schedule in zip(got, schedules)
    ]
    answers = submission.script(steps).steps[0]
    for i, (plan, grid) in enumerate(zip(plans, got)):
        memory, [time] = answers[i], answers[len(got) + i]
        want = {"memory_bytes": memory, "step_seconds": time}
        got_fields = {key: plan[key] for key in want}
        assert got_fields == pytest.approx(want, rel=1e-12), (
            f"plan {grid} with (microbatches, virtual_stages, recomputed_layers) = {schedules[i]}: expected "
            f"{want} (plan_memory and step_seconds of that schedule), got {got_fields}"
        )
        assert time <= fits[grid] * (1 + 1e-12), (
            f"plan {grid}: its schedule {schedules[i]} takes {time!r} s, slower than one sequence per micro-batch "
            f"with v = 1 and every layer recomputed ({fits[grid]!r} s): plan keeps each grid's fastest schedule"
        )


SCHEDULE_KEYWORDS = ("microbatches", "virtual_stages", "recomputed_layers")
