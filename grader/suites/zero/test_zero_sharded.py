"""Hidden suite: ShardedOptimizer (ZeRO stages 1 and 2) on gloo worlds of 2 and 4 ranks trains
exactly like one process with torch.optim's SGD/AdamW on the whole batch (reference.py)."""

from __future__ import annotations

import pytest
import torch

from grader.sandbox import Step
from grader.suites.zero.reference import (
    in_float64,
    make_data,
    make_model,
    make_state,
    rank_slice,
    train_single_process,
)
from grader.testing import assert_matches, expect_exception

TOL = (1e-5, 1e-6)


def run_sharded(submission, world_size: int, optimizer: str, stage: int):
    lr = 0.05 if optimizer == "sgd" else 0.01
    state, inputs, targets = in_float64(
        make_state("plain", "sharded", world_size, optimizer, stage),
        *make_data(world_size, "sharded", optimizer, stage),
    )
    steps = [
        [Step("train_sharded", (state, optimizer, stage, lr, rank_slice(inputs, r), rank_slice(targets, r)))]
        for r in range(world_size)
    ]
    got = [rank[-1] for rank in submission.script_spmd(world_size, steps).steps]
    return got, train_single_process("plain", state, optimizer, lr, inputs, targets)


CASES = [(2, "adamw", 1), (2, "sgd", 1), (2, "adamw", 2), (4, "adamw", 2)]


@pytest.mark.points(4)
@pytest.mark.parametrize(
    ("world_size", "optimizer", "stage"), CASES, ids=[f"world={w}-{o}-stage{s}" for w, o, s in CASES]
)
def test_sharded_optimizer_training_matches_one_process(submission, world_size, optimizer, stage):
    got, expected = run_sharded(submission, world_size, optimizer, stage)
    for rank, result in enumerate(got):
        for name, want in expected.items():
            assert_matches(
                result["state"][name],
                want,
                f"ZeRO stage {stage}, world={world_size}, {optimizer}: rank {rank}'s {name} after 5 steps "
                f"(single-process training on the whole batch gives the expected value)",
                *TOL,
            )


@pytest.mark.points(1)
def test_sharded_optimizer_rejects_stage_3(submission):
    state = make_state("plain", "stage3")
    inputs, targets = make_data(1, "stage3")
    step = Step("train_sharded", (state, "sgd", 3, 0.1, inputs, targets))
    expect_exception("ValueError", lambda: submission.script_spmd(1, [[step]]))


@pytest.mark.points(3)
def test_sharded_optimizer_stage_1_matches_torch_zero_redundancy_optimizer(submission, library, record_property):
    """Compared with torch.distributed.optim.ZeroRedundancyOptimizer (AdamW, 2 ranks, same data):
    the same parameters, and no rank holds more optimizer state than torch's fullest rank."""
    state, inputs, targets = in_float64(make_state("plain", "zero-redundancy"), *make_data(2, "zero-redundancy"))
    slices = [(rank_slice(inputs, r), rank_slice(targets, r)) for r in range(2)]
    steps = [[Step("train_sharded", (state, "adamw", 1, 0.01, x, y))] for x, y in slices]
    got = [rank[-1] for rank in submission.script_spmd(2, steps).steps]
    target = "grader.suites.zero.reference:train_zero_redundancy"
    torch_zero = library.spmd(target, 2, [(state, 0.01, x, y) for x, y in slices]).steps
    torch_zero = [rank[-1] for rank in torch_zero]
    record_property("state_bytes_per_rank", [r["state_bytes"] for r in got])
    record_property("torch_zero_state_bytes_per_rank", [r["state_bytes"] for r in torch_zero])
    for name, want in torch_zero[0]["state"].items():
        assert_matches(got[0]["state"][name], want, f"rank 0's {name} against ZeroRedundancyOptimizer", *TOL)
    most = max(r["state_bytes"] for r in torch_zero)
    for rank, result in enumerate(got):
        assert result["state_bytes"] <= most, (
            f"rank {rank} holds {result['state_bytes']} bytes of optimizer state; ZeroRedundancyOptimizer's "
            f"fullest rank holds {most}: shard the state by bytes (partition_by_bytes)"
        )


def whole_batch_gradients(state, inputs, targets) -> dict:
    """The gradient of one step's mean squared error on the whole batch: what averaging the
    ranks' gradients of equal slices gives."""
    model = make_model("plain").double()
    model.load_state_dict(state)
    torch.nn.functional.mse_loss(model(inputs[0]), targets[0]).backward()
    return {name: p.grad for name, p in model.named_parameters()}


@pytest.mark.points(2)
@pytest.mark.parametrize("stage", [1, 2], ids=["stage1-every-rank-keeps-the-average", "stage2-only-the-owner-keeps-it"])
def test_sharded_optimizer_leaves_the_averaged_gradients_its_stage_promises(submission, stage):
    """After step(): stage 1 all-reduces then divides, so every rank holds every parameter's
    average gradient; stage 2 reduces to the owner, which holds the average, and every other
    rank's .grad is None (one step, 2 ranks, float64; expected: one process's whole-batch
    gradient, torch autograd)."""
    state, inputs, targets = in_float64(make_state("plain", "grads", stage), *make_data(2, "grads", stage, steps=1))
    steps = [
        [Step("train_sharded", (state, "sgd", stage, 0.05, rank_slice(inputs, r), rank_slice(targets, r)))]
        for r in range(2)
    ]
    got = [rank[-1]["grads"] for rank in submission.script_spmd(2, steps).steps]
    expected = whole_batch_gradients(state, inputs, targets)
    for name, want in expected.items():
        holders = [rank for rank in range(2) if got[rank][name] is not None]
        wanted = [0, 1] if stage == 1 else holders[:1]
        assert holders == wanted and holders, (
            f"ZeRO stage {stage}: after step(), ranks {holders} hold a .grad for {name}; "
            + (
                "stage 1 all-reduces every gradient, so every rank keeps it"
                if stage == 1
                else "stage 2 reduces it to its owner only: exactly one rank keeps it, the others set it to None"
            )
        )
        for rank in holders:
            assert_matches(
                got[rank][name],
                want,
                f"ZeRO stage {stage}: rank {rank}'s {name}.grad after step() (the average over ranks: the "
                f"whole batch's gradient; {'all_reduce' if stage == 1 else 'reduce'} then divide by the world size)",
                *TOL,
            )
