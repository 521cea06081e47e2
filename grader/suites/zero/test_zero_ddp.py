"""Hidden suite: DDP on gloo worlds of 2 and 4 ranks trains exactly like one process on the whole
batch (train_single_process in reference.py, torch.optim's own SGD/AdamW). Rank 0 starts from
the given state and every other rank from a different one: construction must broadcast. With no
bucket cap (None or inf) every gradient goes in one bucket: one all_reduce per backward."""

from __future__ import annotations

import pytest

from grader.sandbox import Saved, Step
from grader.suites.zero.reference import (
    STEPS,
    WIDTH,
    greedy_buckets,
    in_float64,
    make_data,
    make_model,
    make_state,
    rank_slice,
    train_single_process,
)
from grader.testing import assert_matches

TOL = (1e-5, 1e-6)
CAP_MB = 0.0015  # 1572 bytes: 3 buckets (a weight with its neighbouring biases) for 6 parameters
SEQ = 3  # tokens per sequence for the transformer


def run_ddp(submission, world_size: int, variant: str, optimizer: str, lr: float, cap_mb: float = CAP_MB):
    """Every rank's train_ddp result, and the single-process reference."""
    seq = SEQ if variant == "transformer" else None
    state, inputs, targets = in_float64(
        make_state(variant, world_size, optimizer), *make_data(world_size, variant, optimizer, seq=seq)
    )
    steps = []
    for rank in range(world_size):
        start = state if rank == 0 else {k: v + 0.5 * (rank + 1) for k, v in state.items()}
        steps.append(
            [
                Step("make_model", (variant, WIDTH), save_as="model", send_back=False),
                # DDP built alone first, so that a missing one is named as such
                Step("DDP", (Saved("model"), cap_mb), send_back=False),
                Step(
                    "train_ddp",
                    (variant, start, optimizer, lr, rank_slice(inputs, rank), rank_slice(targets, rank), cap_mb),
                ),
            ]
        )
    got = [rank[-1] for rank in submission.script_spmd(world_size, steps).steps]
    return got, train_single_process(variant, state, optimizer, lr, inputs, targets)


CASES = [
    (2, "plain", "adamw"),
    (2, "plain", "sgd"),
    (2, "frozen", "adamw"),
    (2, "tied", "sgd"),
    (2, "unused", "sgd"),
    (4, "tied", "adamw"),
    (4, "transformer", "sgd"),
]


@pytest.mark.points(4)
@pytest.mark.parametrize(("world_size", "variant", "optimizer"), CASES, ids=[f"world={w}-{v}-{o}" for w, v, o in CASES])
def test_ddp_training_matches_one_process_on_the_whole_batch(submission, world_size, variant, optimizer):
    lr = 0.05 if optimizer == "sgd" else 0.01
    got, expected = run_ddp(submission, world_size, variant, optimizer, lr)
    for rank, result in enumerate(got):
        for name, want in expected.items():
            assert_matches(
                result["state"][name],
                want,
                f"world={world_size}, {variant} model, {optimizer}: rank {rank}'s {name} after 5 steps "
                f"(single-process training on the whole batch gives the expected value)",
                *TOL,
            )


@pytest.mark.points(2)
def test_ddp_with_one_bucket_for_everything_matches_too(submission):
    got, expected = run_ddp(submission, 2, "plain", "adamw", 0.01, cap_mb=25.0)
    for name, want in expected.items():
        assert_matches(got[1]["state"][name], want, f"bucket_cap_mb=25 (one bucket): rank 1's {name}", *TOL)


NO_CAP = [(2, "plain", "adamw", None), (4, "frozen", "sgd", float("inf"))]


@pytest.mark.points(2)
@pytest.mark.parametrize(
    ("world_size", "variant", "optimizer", "cap_mb"), NO_CAP, ids=["world=2-cap=None", "world=4-cap=inf"]
)
def test_ddp_without_a_cap_allreduces_one_bucket_per_backward(submission, world_size, variant, optimizer, cap_mb):
    lr = 0.05 if optimizer == "sgd" else 0.01
    got, expected = run_ddp(submission, world_size, variant, optimizer, lr, cap_mb=cap_mb)
    trainable = sum(p.numel() for p in make_model(variant).parameters() if p.requires_grad)
    where = f"world={world_size}, {variant} model, bucket_cap_mb={cap_mb}"
    for rank, result in enumerate(got):
        assert result["calls"] == [1] * STEPS and result["elements"] == [trainable] * STEPS, (
            f"{where}: rank {rank} made {result['calls']} dist.all_reduce calls carrying {result['elements']} "
            f"elements in its {STEPS} steps; with no cap every gradient that requires grad goes in ONE bucket: "
            f"one call of {trainable} elements per backward"
        )
        for name, want in expected.items():
            assert_matches(
                result["state"][name],
                want,
                f"{where}: rank {rank}'s {name} after {STEPS} steps "
                f"(single-process training on the whole batch gives the expected value)",
                *TOL,
            )


@pytest.mark.points(3)
def test_ddp_matches_torch_distributed_data_parallel(submission, library):
    """Compared with torch.nn.parallel.DistributedDataParallel (the transformer, AdamW, 2 ranks,
    same data, same starting states): the same parameters on every rank."""
    state, inputs, targets = in_float64(make_state("transformer", "torch-ddp"), *make_data(2, "torch-ddp", seq=SEQ))
    args = [
        ("transformer", state, "adamw", 0.01, rank_slice(inputs, r), rank_slice(targets, r), CAP_MB) for r in range(2)
    ]
    got = [rank[-1] for rank in submission.script_spmd(2, [[Step("train_ddp", a)] for a in args]).steps]
    torch_ddp = [rank[-1] for rank in library.spmd("grader.suites.zero.reference:train_torch_ddp", 2, args).steps]
    for rank in range(2):
        for name, want in torch_ddp[rank]["state"].items():
            assert_matches(
                got[rank]["state"][name], want, f"rank {rank}'s {name} against torch's DistributedDataParallel", *TOL
            )


PLAIN_BYTES = 816 * 8  # the plain MLP's 816 gradients in float64: 6528 bytes
EXACT_CAPS = [
    (PLAIN_BYTES, "exactly-the-gradients"),
    (PLAIN_BYTES - 8, "one-gradient-short"),
    (4223, "a-byte-under-two-weight-and-bias-pairs"),  # 3 buckets: 2304, 2176 and 2048 bytes
]


@pytest.mark.points(1)
@pytest.mark.parametrize(("cap_bytes", "why"), EXACT_CAPS, ids=[why for _, why in EXACT_CAPS])
def test_ddp_bucket_filled_exactly_to_the_cap_stays_one_bucket(submission, cap_bytes, why):
    """ "A bucket is closed when adding the next parameter would EXCEED the cap", and the cap is
    bucket_cap_mb * 2**20 bytes: a cap of exactly the plain MLP's float64 gradients holds them
    all (one all_reduce per step); one gradient less splits them as the rule says (2**20, not
    10**6 nor 2**21, bytes per MB). A cap of 4,223 bytes gives 3 buckets, counted from 0 each
    time one opens: a count carried over from the last bucket gives 4, one started at -1 gives 2."""
    cap_mb = cap_bytes / 2**20  # exact in binary
    buckets = len(greedy_buckets("plain", cap_mb / 2))  # greedy_buckets counts float32 (4-byte) gradients
    got, expected = run_ddp(submission, 2, "plain", "sgd", 0.05, cap_mb=cap_mb)
    for rank, result in enumerate(got):
        assert result["calls"] == [buckets] * STEPS, (
            f"bucket_cap_mb = {cap_bytes} bytes / 2**20 ({why} of the plain MLP's {PLAIN_BYTES} bytes of float64 "
            f"gradients): rank {rank} made {result['calls']} dist.all_reduce calls in its {STEPS} steps, expected "
            f"{buckets} per step: the cap is bucket_cap_mb * 2**20 bytes, and a parameter that brings a bucket "
            f"to exactly the cap still fits; only exceeding it closes the bucket"
        )
        for name, want in expected.items():
            assert_matches(result["state"][name], want, f"rank {rank}'s {name} after {STEPS} steps", *TOL)
