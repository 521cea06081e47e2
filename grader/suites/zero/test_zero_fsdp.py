"""Hidden suite: fully_shard (ZeRO stage 3) on gloo worlds of 2 and 4 ranks.

- Training: 5 steps of the given train_fsdp (the MLP, and the two-block transformer) give the
  same parameters as one process with torch.optim's SGD/AdamW on the whole batch
  (train_single_process in reference.py); the grader rebuilds each layer from the ranks'
  flat shards with the layout of the fully_shard docstring.
- Memory, counted by the given train_fsdp in the worker: a TorchDispatchMode keeps a weak
  reference to every storage any operator allocates while fully_shard, forward and backward
  run (and to the original parameters), and sums those still alive at each layer boundary,
  minus the plain model's count at the same boundary (its activations). A full copy of a
  layer is counted wherever its last reference hides: an attribute, a closure, a global, or the
  tensors autograd saves for backward; escaping the count means leaving the dispatcher.
  Bounds: between layers, the padded shards (1/p of the model) plus one layer; after backward,
  the shards and their gradients plus one layer (a collective's buffer may still be held by
  gloo's thread for a moment after a synchronous call). ALLOWANCE covers activations that
  differ slightly from the plain model's (a few hundred bytes measured).
"""

from __future__ import annotations

import math

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
from grader.testing import assert_matches

TOL = (1e-5, 1e-6)
SEQ = 3  # tokens per sequence for the transformer
ALLOWANCE = 1024


RUNS: dict[tuple, tuple] = {}


def run_fsdp(submission, world_size: int, variant: str, optimizer: str):
    """Every rank's train_fsdp result, and the single-process reference (float64); a case is
    run once per submission, for the training and the memory checks."""
    key = (id(submission), world_size, variant, optimizer)
    if key not in RUNS:
        RUNS[key] = _run_fsdp(submission, world_size, variant, optimizer)
    return RUNS[key]


def _run_fsdp(submission, world_size: int, variant: str, optimizer: str, salt: str = "fsdp"):
    lr = 0.05 if optimizer == "sgd" else 0.01
    seq = SEQ if variant == "transformer" else None
    state, inputs, targets = in_float64(
        make_state(variant, salt, world_size, optimizer), *make_data(world_size, salt, variant, optimizer, seq=seq)
    )
    steps = [
        [Step("train_fsdp", (variant, state, optimizer, lr, rank_slice(inputs, r), rank_slice(targets, r)))]
        for r in range(world_size)
    ]
    got = [rank[-1] for rank in submission.script_spmd(world_size, steps).steps]
    return got, train_single_process(variant, state, optimizer, lr, inputs, targets)


def layer_sizes(variant: str) -> dict[str, int]:
    """Elements of each layer (direct child) of the model."""
    return {name: sum(p.numel() for p in layer.parameters()) for name, layer in make_model(variant).named_children()}


CASES = [(2, "plain", "adamw"), (2, "transformer", "sgd"), (4, "plain", "sgd"), (4, "transformer", "adamw")]


@pytest.mark.points(4)
@pytest.mark.parametrize(("world_size", "variant", "optimizer"), CASES, ids=[f"world={w}-{v}-{o}" for w, v, o in CASES])
def test_fully_shard_training_matches_one_process(submission, world_size, variant, optimizer):
    got, expected = run_fsdp(submission, world_size, variant, optimizer)
    model = make_model(variant)
    for name, layer in model.named_children():
        names = [f"{name}.{p}" for p, _ in layer.named_parameters()]
        sizes = [expected[n].numel() for n in names]
        shards = [result["shards"].get(name) for result in got]
        where = f"world={world_size}, {variant}, {optimizer}: layer {name}"
        assert all(isinstance(s, torch.Tensor) for s in shards), f"{where}: a rank has no flat_shard parameter"
        shard_size = math.ceil(sum(sizes) / world_size)
        for rank, shard in enumerate(shards):
            assert shard.numel() == shard_size, (
                f"{where}: rank {rank}'s flat_shard has {shard.numel()} elements; the layer's {sum(sizes)} "
                f"parameters padded to a multiple of {world_size} give {shard_size} per rank"
            )
        full = torch.cat(shards)[: sum(sizes)].split(sizes)
        for n, value in zip(names, full):
            assert_matches(
                value.view_as(expected[n]),
                expected[n],
                f"{where}: {n} after 5 steps, rebuilt from the ranks' flat shards (single-process training on "
                f"the whole batch gives the expected value)",
                *TOL,
            )


@pytest.mark.perf
@pytest.mark.points(8)
@pytest.mark.parametrize(
    ("world_size", "variant"), [(2, "plain"), (4, "transformer")], ids=["world=2-mlp", "world=4-transformer"]
)
def test_fully_shard_holds_only_its_shards_between_layers(submission, world_size, variant, record_property):
    got, _ = run_fsdp(submission, world_size, variant, "adamw")
    sizes = layer_sizes(variant)
    shards = 8 * sum(math.ceil(n / world_size) for n in sizes.values())  # float64, padded
    largest = 8 * max(sizes.values())
    resident_bound = shards + largest + ALLOWANCE
    backward_bound = 2 * shards + largest + ALLOWANCE
    resident = [max(max(step) for step in r["resident_bytes"]) for r in got]
    after_backward = [max(r["after_backward_bytes"]) for r in got]
    record_property("model_bytes", 8 * sum(sizes.values()))
    record_property("largest_layer_bytes", largest)
    record_property("resident_bytes_per_rank", resident)
    record_property("resident_bound", resident_bound)
    record_property("after_backward_bytes_per_rank", after_backward)
    record_property("after_backward_bound", backward_bound)
    for rank in range(world_size):
        assert resident[rank] <= resident_bound, (
            f"world={world_size}, {variant}: between two layers rank {rank} held {resident[rank]} bytes of "
            f"parameters; the model has {8 * sum(sizes.values())}, so 1/{world_size} of it plus one layer "
            f"({resident_bound}) is allowed. Free each layer's gathered parameters after its forward, and "
            f"do not let autograd keep them for backward (saved_tensors_hooks): gather them again in backward"
        )
        assert after_backward[rank] <= backward_bound, (
            f"world={world_size}, {variant}: after backward rank {rank} held {after_backward[rank]} bytes; "
            f"its parameter shards and their gradients plus one layer ({backward_bound}) are allowed. Free the "
            f"parameters gathered for backward and keep only this rank's chunk of each gradient (reduce-scatter)"
        )
