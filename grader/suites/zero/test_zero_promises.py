"""Hidden suite: the promises of the zero docstrings that the other files leave untested
(tests/spec/promises.toml maps every promise to its tests): every condition of each documented
ValueError, one bad argument per call; ShardedOptimizer's skipping of parameters that got no
gradient, against torch.optim.AdamW run here on the same model (reference.py's make_model), and
its split by bytes of parameters of three dtypes; fully_shard's zero padding when a layer does
not divide by the world size, and its integer inputs left uncast under a compute dtype, both
against torch.autograd on the unsharded model here, and the layers left with no view of the
gathered vector after forward and backward."""

from __future__ import annotations

from copy import deepcopy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from grader.sandbox import Saved, Step
from grader.suites.zero.reference import (
    WIDTH,
    make_model,
    make_state,
)
from grader.testing import assert_matches, expect_exception, generator


def _expect(error_type: str, call, what: str) -> None:
    """expect_exception with the arguments of the call in the message."""
    try:
        expect_exception(error_type, call)
    except AssertionError as error:
        raise AssertionError(f"{what}: {error}") from None


@pytest.mark.points(1)
@pytest.mark.parametrize(
    ("arguments", "why"),
    [((1000, 4, -1), "stage -1 is outside 0..3"), ((1000, 0, 1), "world size 0 is below 1")],
    ids=["stage-minus-1", "world-size-0"],
)
def test_zero_memory_rejects_each_documented_bad_input(submission, arguments, why):
    """Docstring: "Raises ValueError for a stage outside 0..3 or a world size below 1"."""
    memory = submission.function("zero_memory_per_rank")
    _expect("ValueError", lambda: memory(*arguments), f"zero_memory_per_rank{arguments} ({why})")


@pytest.mark.points(1)
def test_checkpointed_forward_rejects_zero_segments(submission):
    """Docstring: "Raises ValueError unless 1 <= segments <= len(blocks)": the lower bound."""
    steps = [
        Step("make_blocks", (3, 8, 0), save_as="blocks", send_back=False),
        Step("checkpointed_forward", (Saved("blocks"), torch.zeros(2, 8, dtype=torch.float64), 0)),
    ]
    _expect("ValueError", lambda: submission.script(steps), "checkpointed_forward(3 blocks, segments=0)")


@pytest.mark.points(1)
def test_sharded_optimizer_rejects_stage_0(submission):
    """Docstring: "Raises ValueError for a stage other than 1 or 2" (stage 3 is in test_zero_sharded)."""
    steps = [
        Step("make_model", ("plain", WIDTH), save_as="model", send_back=False),
        Step("model.parameters", save_as="params", send_back=False),
        Step("ShardedOptimizer", (Saved("params"), torch.optim.SGD, 0), {"lr": 0.1}, send_back=False),
    ]
    _expect("ValueError", lambda: submission.script_spmd(1, [steps]), "ShardedOptimizer(..., stage=0)")


@pytest.mark.points(2)
def test_sharded_optimizer_skips_a_parameter_without_gradient(submission):
    """The "unused" MLP (a layer forward never calls) on a world of one rank, one AdamW step
    (weight decay 0.1) against torch.optim.AdamW on the same model here: the unused layer has no
    .grad, so AdamW leaves it alone (no weight decay either); a ShardedOptimizer that all-reduces
    a None gradient crashes, and one that gives it zeros decays it."""
    state = {k: v.double() for k, v in make_state("unused", "skip").items()}
    x = torch.randn(4, WIDTH, generator=generator("sharded-skip"), dtype=torch.float64)
    options = {"lr": 0.01, "weight_decay": 0.1}
    steps = [
        Step("make_model", ("unused", WIDTH), save_as="model", send_back=False),
        Step("model.double", send_back=False),
        Step("model.load_state_dict", (state,), send_back=False),
        Step("model.parameters", save_as="params", send_back=False),
        Step("ShardedOptimizer", (Saved("params"), torch.optim.AdamW, 1), options, save_as="opt", send_back=False),
        Step("model.forward", (x,), save_as="y", send_back=False),
        Step("y.sum", save_as="loss", send_back=False),
        Step("loss.backward", send_back=False),
        Step("opt.step", send_back=False),
        Step("model.state_dict"),
    ]
    got = submission.script_spmd(1, [steps]).steps[0][-1]
    model = make_model("unused").double()
    model.load_state_dict(state)
    optimizer = torch.optim.AdamW(model.parameters(), **options)
    model(x).sum().backward()
    optimizer.step()
    for name, want in model.state_dict().items():
        assert_matches(
            got[name],
            want,
            f"{name} after one ShardedOptimizer(AdamW, stage 1) step on one rank, against torch.optim.AdamW "
            f"(the layer 'spare' is never called: its .grad is None and it must be skipped)",
            1e-12,
            1e-12,
        )


class _NarrowMLP(nn.Module):
    """The given ddp.MLP("plain", width), rebuilt here: Linear -> tanh -> Linear -> tanh -> Linear."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.inp, self.hidden, self.out = (nn.Linear(width, width) for _ in range(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.tanh(self.hidden(torch.tanh(self.inp(x)))))


@pytest.mark.points(2)
def test_fully_shard_pads_layers_that_do_not_divide_by_the_world_size(submission):
    """4 ranks, the given MLP of width 5 in float64 (layers of 30 parameters, not a multiple of
    4), one forward and backward of y.sum() on each rank's rows: every layer's flat_shard is chunk
    r of its parameters flattened in named_parameters() order and zero-padded to 32, and
    flat_shard.grad chunk r of the average over ranks of the gradient, padding included (zero),
    both computed here with torch.autograd on the unsharded model."""
    world_size, width = 4, 5
    torch.manual_seed(int(torch.randint(0, 2**31, (1,), generator=generator("fsdp-padding-seed"))))
    model = _NarrowMLP(width).double()
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    x = torch.randn(world_size * 2, width, generator=generator("fsdp-padding"), dtype=torch.float64)
    layers = [name for name, _ in model.named_children()]
    steps = []
    for rank in range(world_size):
        rank_steps = [
            Step("make_model", ("plain", width), save_as="model", send_back=False),
            Step("model.double", send_back=False),
            Step("model.load_state_dict", (state,), send_back=False),
            Step("fully_shard", (Saved("model"),), send_back=False),
            Step("model.forward", (x[2 * rank : 2 * rank + 2],), save_as="y", send_back=False),
            Step("y.sum", save_as="loss", send_back=False),
            Step("loss.backward", send_back=False),
        ]
        for name in layers:
            rank_steps += [
                Step("model.get_submodule", (name,), save_as=f"layer_{name}", send_back=False),
                Step(f"layer_{name}.get_parameter", ("flat_shard",), save_as=f"shard_{name}"),
                Step(f"shard_{name}.__getattribute__", ("grad",)),
            ]
        steps.append(rank_steps)
    results = [rank[-3 * len(layers) :] for rank in submission.script_spmd(world_size, steps).steps]
    (model(x).sum() / world_size).backward()  # the average over ranks of each rank's gradient
    for index, name in enumerate(layers):
        params = list(getattr(model, name).parameters())
        total = sum(p.numel() for p in params)
        padded = -(-total // world_size) * world_size
        flat = F.pad(torch.cat([p.detach().reshape(-1) for p in params]), (0, padded - total))
        grads = F.pad(torch.cat([p.grad.reshape(-1) for p in params]), (0, padded - total))
        for rank, (chunk, grad_chunk) in enumerate(zip(flat.chunk(world_size), grads.chunk(world_size))):
            shard, grad = results[rank][3 * index + 1 : 3 * index + 3]
            where = f"world={world_size}, layer {name} ({total} parameters, zero-padded to {padded}), rank {rank}"
            assert_matches(
                shard.detach(), chunk, f"{where}: flat_shard after fully_shard (chunk {rank} of {world_size})"
            )
            assert grad is not None, f"{where}: flat_shard.grad is None after backward"
            assert_matches(
                grad, grad_chunk, f"{where}: flat_shard.grad (the average over ranks of chunk {rank})", 1e-10, 1e-12
            )


@pytest.mark.points(2)
def test_sharded_optimizer_splits_parameters_of_mixed_dtypes_by_bytes(submission):
    """Docstring: "split over the p ranks of the group with partition_by_bytes (sizes in bytes)".
    Two ranks, three parameters whose bytes and element counts order them differently: 60 float64
    (480 bytes), 100 float32 (400) and 200 float16 (400). By bytes rank 0 owns the float64 one and
    rank 1 the other two; by element count (or elements over element size) the float16 one goes
    first, to rank 0. The parameters each rank's inner optimizer holds are read from its
    param_groups right after construction (no step: float16 AdamW needs none)."""
    shapes = {torch.float64: (6, 10), torch.float32: (10, 10), torch.float16: (20, 10)}
    params = [nn.Parameter(torch.zeros(shape, dtype=dtype)) for dtype, shape in shapes.items()]
    sizes = [p.numel() * p.element_size() for p in params]
    steps = [
        Step("ShardedOptimizer", (params, torch.optim.AdamW, 1), {"lr": 0.1}, save_as="opt", send_back=False),
        Step("opt.optimizer.param_groups.copy"),
    ]
    groups = [rank[-1] for rank in submission.script_spmd(2, [steps, steps]).steps]
    expected = {0: [torch.float64], 1: [torch.float32, torch.float16]}  # partition_by_bytes(sizes, 2)
    for rank, rank_groups in enumerate(groups):
        owned = sorted((p.dtype for group in rank_groups for p in group["params"]), key=str)
        assert owned == sorted(expected[rank], key=str), (
            f"ShardedOptimizer over 3 parameters of {sizes} bytes ({', '.join(map(str, shapes))}) on 2 ranks: "
            f"rank {rank}'s inner optimizer holds the {owned} ones, partition_by_bytes gives it the "
            f"{expected[rank]} ones: pass each parameter's size in bytes (numel * element_size) to partition_by_bytes"
        )


@pytest.mark.points(2)
def test_fully_shard_leaves_integer_inputs_uncast(submission):
    """Docstring: "cast the layer's floating-point tensor inputs to compute_dtype": an integer input
    stays as it is. Two ranks, an Embedding(11, 16) then a Linear(16, 8), float32, sharded with
    compute_dtype=bfloat16 and fed token ids (int64): casting the ids to bfloat16 makes the
    embedding refuse them. Each rank's flat_shard.grad after one backward of the output's sum
    (in float32) against the same recipe rank by rank here (torch.autograd on a bfloat16 copy,
    gradients cast to float32 and averaged), to bfloat16's rounding."""
    world_size, dtype = 2, torch.bfloat16
    torch.manual_seed(int(torch.randint(0, 2**31, (1,), generator=generator("fsdp-tokens-seed"))))
    model = nn.Sequential(nn.Embedding(11, WIDTH), nn.Linear(WIDTH, 8))
    tokens = torch.randint(0, 11, (world_size, 2, 3), generator=generator("fsdp-tokens"))
    steps = [
        [
            Step("fully_shard", (model, dtype), save_as="model", send_back=False),
            Step("model.forward", (tokens[rank],), save_as="y", send_back=False),
            Step("y.float", save_as="y32", send_back=False),
            Step("y32.sum", save_as="loss", send_back=False),
            Step("loss.backward", send_back=False),
            *(Step(f"model.{layer}.flat_shard.grad.clone") for layer in ("0", "1")),
        ]
        for rank in range(world_size)
    ]
    got = [rank[-2:] for rank in submission.script_spmd(world_size, steps).steps]
    grads = []
    for rank in range(world_size):
        layers = [deepcopy(layer).to(dtype) for layer in model]
        nn.Sequential(*layers)(tokens[rank]).float().sum().backward()
        grads.append([torch.cat([p.grad.float().reshape(-1) for p in layer.parameters()]) for layer in layers])
    for index in range(2):
        full = (grads[0][index] + grads[1][index]) / world_size
        padded = F.pad(full, (0, -full.numel() % world_size))
        for rank, chunk in enumerate(padded.chunk(world_size)):
            assert_matches(
                got[rank][index],
                chunk,
                f"fully_shard(Embedding -> Linear, compute_dtype=bfloat16) fed int64 token ids, rank {rank}: "
                f"flat_shard.grad of layer {index} (cast only floating-point inputs; the ids stay int64)",
                1e-2,
                1e-2,
            )


@pytest.mark.points(1)
def test_fully_shard_leaves_no_parameter_tensor_on_the_layers_after_forward_and_backward(submission):
    """Docstring: after forward, "drop every reference to the gathered vector", and "the original
    parameters are removed from the layer". Two ranks, the given MLP in float64, one forward and
    backward: each layer's weight and bias (attributes the forward gave back as views of the
    gathered vector) read None or are gone, in the module's __dict__ and its _parameters. A view
    kept there holds the gathered vector's storage (emptied or not) and hands the next reader a
    tensor with no memory behind it."""
    world_size = 2
    state = {k: v.double() for k, v in make_state("plain", "fsdp-views").items()}
    x = torch.randn(world_size, WIDTH, generator=generator("fsdp-views"), dtype=torch.float64)
    layers = ("inp", "hidden", "out")
    steps = [
        Step("make_model", ("plain", WIDTH), save_as="model", send_back=False),
        Step("model.double", send_back=False),
        Step("model.load_state_dict", (state,), send_back=False),
        Step("fully_shard", (Saved("model"),), send_back=False),
        Step("model.forward", (x,), save_as="y", send_back=False),
        Step("y.sum", save_as="loss", send_back=False),
        Step("loss.backward", send_back=False),
    ]
    names = [f"{layer}.{name}" for layer in layers for name in ("weight", "bias")]
    for index, (table, name) in enumerate((table, name) for table in ("__dict__", "_parameters") for name in names):
        layer, attribute = name.split(".")
        steps += [  # the type's name only: a view of an emptied storage cannot be sent back
            Step(f"model.{layer}.{table}.get", (attribute,), save_as=f"kept{index}", send_back=False),
            Step(f"kept{index}.__class__.__name__.__str__"),
        ]
    kept = [rank[-24:][1::2] for rank in submission.script_spmd(world_size, [steps] * world_size).steps]
    where = [f"{name} (an attribute)" for name in names] + [f"{name} (a parameter)" for name in names]
    for rank, types in enumerate(kept):
        left = [f"{name}: a {kind}" for name, kind in zip(where, types) if kind != "NoneType"]
        assert not left, (
            f"world={world_size}, the MLP, after one forward and backward: rank {rank}'s layers still hold "
            f"{', '.join(left)}; after the layer ran, set each parameter back to None (the layer keeps only "
            f"flat_shard) so that no view of the gathered vector outlives forward"
        )
