"""Hidden suite for sync.py (lecture 16, section 7): the trainer's FSDP chunks into the engine's
tensor-parallel shards, every byte counted, and the two counts around it (sync_bytes, sync_cost).

sync_weights runs on gloo worlds of 4 and 5 processes in four placements: colocated (every rank
trains and generates; the engine is 2 replicas of tp 2), disaggregated (trainer [0, 1], engine
[2, 3]), ranks out of order (trainer [3, 1], engine [0, 2], in float32: the dtype travels to
engine ranks holding no chunk) and a trainer of 3 ranks on a world of 5 (chunks end in padding;
rank 2 trains and generates, rank 3 only generates, rank 1 does neither). Every engine rank must
return exactly (float64 or float32, bit for bit: nothing is computed) what sync_reference.py
slices from the full model, every other rank None. Each placement runs once per submission; its
bytes, counted by the kernel per rank (grader/sandbox/pool.py, as in modules collectives and
zero), are held to the least traffic (sync_reference.least_traffic) plus a gloo header per
(sender, receiver) pair and the slack of grader/perf.py: a sync that gathers whole units on
every engine rank sends about twice the least and fails.
"""

from __future__ import annotations

import pytest
import torch

from grader.models.tiny_gpt import TinyGPTConfig
from grader.perf import with_slack
from grader.suites.post_training.sync_reference import (
    CONFIG,
    expected_shards,
    least_traffic,
    model,
    trainer_chunks,
)
from grader.testing import assert_matches, expect_exception

# gloo's header per message (about 150 bytes measured, see grader/perf.py), one per pair of ranks
# exchanging weights, and one more per dtype code (8 bytes) an engine rank without a chunk gets.
HEADER_BYTES = 256
SEED = 3
HINT = "see sync_weights' docstring: engine_ranks[k] is tp rank k % tp; the chunk at trainer_ranks[i] is chunk i"

# name -> (world size, trainer ranks, engine ranks, tp, dtype)
PLACEMENTS = {
    "colocated-4-ranks-as-2-replicas-of-tp-2": (4, [0, 1, 2, 3], [0, 1, 2, 3], 2, torch.float64),
    "disaggregated-trainer-0-1-engine-2-3": (4, [0, 1], [2, 3], 2, torch.float64),
    "out-of-order-trainer-3-1-engine-0-2-float32": (4, [3, 1], [0, 2], 2, torch.float32),
    "trainer-of-3-on-5-ranks-4-0-2-engine-2-3": (5, [4, 0, 2], [2, 3], 2, torch.float64),
}
RUNS: dict[tuple[int, str], object] = {}


def run(submission, placement: str):
    """The placement's sync on its world, once per submission: (result, full parameters)."""
    key = (id(submission), placement)
    if key not in RUNS:
        world, trainer, engine, tp, dtype = PLACEMENTS[placement]
        params = model(SEED, dtype)
        args = []
        for rank in range(world):
            shards = trainer_chunks(params, trainer.index(rank), len(trainer)) if rank in trainer else None
            args.append((shards, CONFIG, list(trainer), list(engine), tp))
        RUNS[key] = submission.function("sync_weights").spmd(world, args), params
    return RUNS[key]


def check_shards(submission, placement: str) -> None:
    result, params = run(submission, placement)
    _, trainer, engine, tp, dtype = PLACEMENTS[placement]
    where = f"{placement} (trainer_ranks={trainer}, engine_ranks={engine}, tp={tp}, {dtype})"
    for rank, got in enumerate(result.outputs):
        if rank not in engine:
            assert got is None, f"{where}: rank {rank} is not an engine rank, expected None, got {type(got).__name__}"
            continue
        k = engine.index(rank)
        want = expected_shards(params, k % tp, tp)
        assert isinstance(got, dict) and list(got) == list(want), (
            f"{where}: engine rank {rank} must return {{name: shard}} for every parameter in named_parameters() "
            f"order; expected keys {list(want)}, got {list(got) if isinstance(got, dict) else type(got).__name__}"
        )
        for name, value in want.items():
            assert got[name].dtype == dtype, f"{where}: rank {rank}'s {name} is {got[name].dtype}, expected {dtype}"
            assert_matches(
                got[name],
                value,
                f"{where}: engine rank {rank} (replica {k // tp}, tp rank {k % tp})'s {name}; {HINT}",
                0.0,
                0.0,
            )


@pytest.mark.points(3)
def test_sync_weights_colocated_on_4_ranks_gives_each_rank_its_tp_shard(submission):
    check_shards(submission, "colocated-4-ranks-as-2-replicas-of-tp-2")


@pytest.mark.points(3)
def test_sync_weights_disaggregated_gives_engine_ranks_their_shards_and_trainer_ranks_none(submission):
    check_shards(submission, "disaggregated-trainer-0-1-engine-2-3")


@pytest.mark.points(3)
def test_sync_weights_with_ranks_out_of_order_follows_positions_in_the_lists(submission):
    check_shards(submission, "out-of-order-trainer-3-1-engine-0-2-float32")


@pytest.mark.points(3)
def test_sync_weights_with_a_trainer_of_3_pads_chunks_and_mixes_roles_on_5_ranks(submission):
    check_shards(submission, "trainer-of-3-on-5-ranks-4-0-2-engine-2-3")


@pytest.mark.perf
@pytest.mark.points(3)
@pytest.mark.parametrize("placement", list(PLACEMENTS))
def test_sync_weights_sends_at_most_the_least_traffic(submission, device, record_property, placement):
    result, _ = run(submission, placement)
    world, trainer, engine, tp, dtype = PLACEMENTS[placement]
    check_shards(submission, placement)  # bytes are worth points only for a correct sync
    if not any(result.bytes_sent) and device == "cuda":
        pytest.skip("no bytes were counted: NCCL moves data where the kernel does not count it")
    least, _, pairs = least_traffic(trainer, engine, tp, torch.empty(0, dtype=dtype).element_size())
    headers = (pairs + len([e for e in engine if e not in trainer])) * HEADER_BYTES
    record_property("bytes_sent_per_rank", result.bytes_sent)
    record_property("least_bytes_per_rank", [least.get(r, 0) for r in range(world)])
    for rank, sent in enumerate(result.bytes_sent):
        allowed = with_slack(least.get(rank, 0) + headers)
        assert sent <= allowed, (
            f"{placement}: rank {rank} sent {sent:,} bytes; the least is {least.get(rank, 0):,} (the elements of "
            f"engine shards in its chunks, each once per engine rank that needs it, never to itself, never padding; "
            f"+ {headers:,} for headers and slack: {int(allowed):,}). Send each engine rank only the elements of its "
            f"tp shard, not whole units or the whole model (sync_bytes counts them)"
        )


# 2 heads of 4 dimensions on a model width of 9, MLP width 9: tp = 2 divides the heads, not the MLP
WIDTH_9 = TinyGPTConfig(max_seq_len=32, d_model=9, num_heads=2, num_kv_heads=2, mlp_ratio=1)
BAD_PLACEMENTS = [
    pytest.param(2, [0, 1], [0, 1], 0, CONFIG, id="tp-0"),
    pytest.param(2, [0, 1], [], 1, CONFIG, id="engine-ranks-empty"),
    pytest.param(2, [], [0, 1], 1, CONFIG, id="trainer-ranks-empty"),
    pytest.param(2, [0, 1], [0, 1, 0, 1], 2, CONFIG, id="engine-rank-twice"),
    pytest.param(2, [1, 1], [0, 1], 1, CONFIG, id="trainer-rank-twice"),
    pytest.param(2, [0, 1], [0, 2], 1, CONFIG, id="engine-rank-outside-the-world"),
    pytest.param(2, [0, 1], [0, 1], 4, CONFIG, id="engine-ranks-not-a-multiple-of-tp"),
    pytest.param(2, [0, 1], [0, 1], 2, TinyGPTConfig(max_seq_len=32, num_kv_heads=1), id="tp-2-of-1-kv-head"),
    pytest.param(2, [0, 1], [0, 1], 2, WIDTH_9, id="tp-2-of-an-mlp-width-of-9"),
]


@pytest.mark.points(0.5)
@pytest.mark.parametrize(("world", "trainer", "engine", "tp", "config"), BAD_PLACEMENTS)
def test_sync_weights_refuses_a_bad_placement_on_every_rank(submission, world, trainer, engine, tp, config):
    params = model(SEED, torch.float64)  # right chunks on trainer ranks: only the placement is wrong
    chunks = {r: trainer_chunks(params, i, len(trainer)) for i, r in enumerate(trainer)}
    args = [(chunks.get(r), config, trainer, engine, tp) for r in range(world)]
    error = expect_exception("ValueError", lambda: submission.function("sync_weights").spmd(world, args))
    # The grader says "every rank: <message>" only when every rank raised the same message.
    assert error.message.startswith("every rank"), (
        f"trainer_ranks={trainer}, engine_ranks={engine}, tp={tp}: every rank sees the same placement, so every "
        f"rank must raise the same ValueError before any communication; got it from fewer ranks, or with "
        f"different messages (name the placement, not the rank):\n{error.message}"
    )


def wrong_shards(case: str):
    """A world of 2 whose every rank passes shards that do not fit its role."""
    params = model(SEED, torch.float64)
    if case == "none-on-the-trainer-and-chunks-on-the-engine":
        return [(None, CONFIG, [0], [1], 1), (trainer_chunks(params, 0, 1), CONFIG, [0], [1], 1)]
    if case == "chunks-of-3-for-a-trainer-of-2":
        return [(trainer_chunks(params, r, 3), CONFIG, [0, 1], [0, 1], 1) for r in range(2)]
    chunks = [trainer_chunks(params, r, 2) for r in range(2)]
    if case == "int64-chunks":
        return [({u: c.long() for u, c in chunk.items()}, CONFIG, [0, 1], [0, 1], 1) for chunk in chunks]
    for c in chunks:  # "a-unit-missing"
        del c["norm"]
    return [(c, CONFIG, [0, 1], [0, 1], 1) for c in chunks]


@pytest.mark.points(0.5)
@pytest.mark.parametrize(
    "case",
    [
        "none-on-the-trainer-and-chunks-on-the-engine",
        "chunks-of-3-for-a-trainer-of-2",
        "a-unit-missing",
        "int64-chunks",
    ],
)
def test_sync_weights_refuses_shards_that_do_not_fit_the_ranks_role(submission, case):
    error = expect_exception("ValueError", lambda: submission.function("sync_weights").spmd(2, wrong_shards(case)))
    assert "left waiting" not in error.message, (
        f"{case}: both ranks' shards are wrong, so both must raise ValueError before any communication:\n"
        f"{error.message}"
    )


# ------------------------------------------------------------------ sync_bytes

BYTES_CASES = [
    pytest.param([0, 1], [2, 3], 2, 4, id="disaggregated-tp-2-float32"),
    pytest.param([0, 1], [0, 1], 1, 4, id="colocated-2-replicas-of-tp-1-float32"),
    pytest.param([0, 1, 2, 3], [0, 1, 2, 3], 2, 8, id="colocated-4-as-2-replicas-of-tp-2-float64"),
    pytest.param([3, 1], [0, 2, 1, 3], 2, 2, id="out-of-order-overlapping-bf16"),
    pytest.param([4, 0, 2], [2, 3], 2, 8, id="trainer-of-3-padded-float64"),
    pytest.param([0, 1, 2], [5], 1, 4, id="one-engine-rank-of-tp-1"),
]


@pytest.mark.points(1)
@pytest.mark.parametrize(("trainer", "engine", "tp", "size"), BYTES_CASES)
def test_sync_bytes_counts_what_each_rank_must_send_and_receive(submission, trainer, engine, tp, size):
    sent, received, _ = least_traffic(trainer, engine, tp, size)
    want = {r: (sent[r], received[r]) for r in list(trainer) + [e for e in engine if e not in trainer]}
    got = submission.function("sync_bytes")(CONFIG, trainer, engine, tp, size)
    assert got == want, (
        f"trainer_ranks={trainer}, engine_ranks={engine}, tp={tp}, {size} bytes per element: expected "
        f"{{rank: (sent, received)}} = {want}, got {got}. An element of engine rank e's tp shard comes from the "
        f"trainer rank whose chunk holds it, unless that is e itself; padding is never sent"
    )


def test_sync_bytes_gives_the_docstrings_worked_values(submission):
    got = submission.function("sync_bytes")(CONFIG, [0, 1], [2, 3], 2)
    want = {0: (218112, 0), 1: (216576, 0), 2: (0, 217344), 3: (0, 217344)}
    assert got == want, f"the docstring's disaggregated example: expected {want}, got {got}"
    got = submission.function("sync_bytes")(CONFIG, [0, 1], [0, 1], 1)
    want = {0: (199296, 199296), 1: (199296, 199296)}
    assert got == want, f"the docstring's colocated example: expected {want}, got {got}"


@pytest.mark.points(0.25)
@pytest.mark.parametrize(
    ("trainer", "engine", "tp", "size"),
    [
        pytest.param([0, 1], [0, 1], 0, 4, id="tp-0"),
        pytest.param([], [0, 1], 1, 4, id="trainer-empty"),
        pytest.param([0, 1], [], 1, 4, id="engine-empty"),
        pytest.param([0, 0], [0, 1], 1, 4, id="trainer-rank-twice"),
        pytest.param([0, 1], [0, -1], 1, 4, id="negative-rank"),
        pytest.param([0, 1], [0, 1, 2], 2, 4, id="engine-not-a-multiple-of-tp"),
        pytest.param([0, 1], [0, 1, 2, 3], 4, 4, id="tp-4-of-2-kv-heads"),
        pytest.param([0, 1], [0, 1], 1, 0, id="zero-bytes-per-element"),
    ],
)
def test_sync_bytes_refuses_bad_placements(submission, trainer, engine, tp, size):
    expect_exception("ValueError", lambda: submission.function("sync_bytes")(CONFIG, trainer, engine, tp, size))


# ------------------------------------------------------------------ sync_cost

COST_CASES = [  # the docstring's worked values: (args, kwargs, expected components)
    ((7e9, 2, "colocated", 8, 8, 2), {}, {"nvlink_s": 6.125e9 / 450e9, "network_s": 0.0, "hidden_s": 0.0}),
    ((70e9, 2, "colocated", 64, 64, 8), {}, {"nvlink_s": 17.5e9 * 7 / 64 / 450e9, "network_s": 0.30625}),
    ((70e9, 2, "disaggregated", 64, 32, 8), {}, {"nvlink_s": 0.0, "network_s": 0.35, "total_s": 0.35}),
    ((70e9, 2, "disaggregated", 64, 32, 8), {"overlap_s": 0.2}, {"hidden_s": 0.2, "total_s": 0.15}),
    ((7e9, 2, "colocated", 8, 8, 2), {"wake_up_s": 1.5}, {"wake_up_s": 1.5, "total_s": 1.5 + 6.125e9 / 450e9}),
    # the trainer's NICs are the bottleneck: 8 replicas of tp 1 from 2 trainer GPUs
    ((1e9, 4, "disaggregated", 2, 8, 1), {"nic_bytes_per_s": 25e9}, {"network_s": 8 * 4e9 / 2 / 25e9}),
]


@pytest.mark.points(1)
@pytest.mark.parametrize(("args", "kwargs", "want"), COST_CASES, ids=[f"case-{i}" for i in range(len(COST_CASES))])
def test_sync_cost_gives_the_documented_components(submission, args, kwargs, want):
    got = submission.function("sync_cost")(*args, **kwargs)
    keys = {"nvlink_s", "network_s", "wake_up_s", "hidden_s", "total_s"}
    where = f"sync_cost{args} {kwargs}"
    assert isinstance(got, dict) and set(got) == keys, f"{where}: expected keys {sorted(keys)}, got {got}"
    total = max(got["nvlink_s"], got["network_s"]) + got["wake_up_s"] - got["hidden_s"]
    assert got["total_s"] == pytest.approx(total, rel=1e-12), (
        f"{where}: total_s must be max(nvlink_s, network_s) + wake_up_s - hidden_s, got {got}"
    )
    for key, value in want.items():
        assert got[key] == pytest.approx(value, rel=1e-9, abs=1e-15), (
            f"{where}: {key} expected {value}, got {got[key]} (all: {got}); see the docstring's model"
        )


@pytest.mark.points(2)
def test_sync_cost_grows_with_size_and_falls_with_bandwidth_tp_and_overlap(submission):
    cost = submission.function("sync_cost")
    for placement, trainer, engine in (("colocated", 64, 64), ("colocated", 4, 4), ("disaggregated", 16, 32)):
        base = dict(num_parameters=13e9, bytes_per_parameter=2, placement=placement, trainer_gpus=trainer,
                    engine_gpus=engine, tp=2)  # fmt: skip
        total = cost(**base)["total_s"]
        more = [cost(**{**base, "num_parameters": 26e9}), cost(**{**base, "bytes_per_parameter": 4})]
        less = [cost(**{**base, "tp": 4}), cost(**base, nvlink_bytes_per_s=900e9), cost(**base, nic_bytes_per_s=100e9)]
        if placement == "disaggregated":
            more.append(cost(**{**base, "engine_gpus": 64}))
            less.append(cost(**base, overlap_s=0.1))
        for other in more:
            assert other["total_s"] >= total, f"{placement}: more bytes or replicas took less: {other}, {total}"
        for other in less:
            assert other["total_s"] <= total, f"{placement}: more bandwidth, tp or overlap took more: {other}, {total}"
    colocated = cost(70e9, 2, "colocated", 64, 64, 8)["total_s"]
    assert colocated > 0 and cost(70e9, 2, "colocated", 1, 1, 1)["total_s"] == 0.0, (
        "colocated on one GPU: its own chunk is the whole model, nothing moves (total_s 0)"
    )


@pytest.mark.points(0.25)
@pytest.mark.parametrize(
    ("args", "kwargs"),
    [
        pytest.param((7e9, 2, "hybrid", 8, 8, 2), {}, id="unknown-placement"),
        pytest.param((0, 2, "colocated", 8, 8, 2), {}, id="no-parameters"),
        pytest.param((7e9, 0, "colocated", 8, 8, 2), {}, id="no-bytes-per-parameter"),
        pytest.param((7e9, 2, "colocated", 8, 8, 2), {"gpus_per_node": 0}, id="no-gpus-per-node"),
        pytest.param((7e9, 2, "colocated", 8, 8, 2), {"wake_up_s": -1.0}, id="negative-wake-up"),
        pytest.param((7e9, 2, "colocated", 8, 8, 3), {}, id="engine-not-a-multiple-of-tp"),
        pytest.param((7e9, 2, "colocated", 8, 16, 2), {}, id="colocated-on-different-gpus"),
        pytest.param((7e9, 2, "colocated", 8, 8, 2), {"overlap_s": 1.0}, id="colocated-with-overlap"),
        pytest.param((7e9, 2, "disaggregated", 8, 8, 2), {"wake_up_s": 1.0}, id="disaggregated-wakes-up"),
        pytest.param((7e9, 2, "disaggregated", 8, 8, 2), {"nic_bytes_per_s": 0.0}, id="no-bandwidth"),
        pytest.param((7e9, 2, "disaggregated", 0, 8, 2), {}, id="no-trainer-gpus"),
        pytest.param((7e9, 2, "disaggregated", 8, 8, 2), {"overlap_s": -1.0}, id="negative-overlap"),
    ],
)
def test_sync_cost_refuses_bad_inputs(submission, args, kwargs):
    expect_exception("ValueError", lambda: submission.function("sync_cost")(*args, **kwargs))
