"""Hidden suite: ColumnParallelLinear, RowParallelLinear and the ParallelBlock (with its
ParallelSelfAttention and ParallelMLP) against the same layers on one process, in float64, on gloo
worlds of 2, 3 and 4 ranks.

- Linear layers (given linear_step): output, input gradient and this rank's weight and bias
  gradients against nn.Linear on the whole weight; gather_output / input_is_parallel both ways,
  with and without sequence parallelism and bias, on 2 ranks, and the gathering and splitting
  flags on 3 and 4; the collectives counted by kind and size.
- The block (given block_step): output, input gradient and every parameter's gradient rebuilt
  from the ranks' shards with the layouts of the docstrings (reference.assemble_grads), against
  reference.Block (attention by torch's SDPA with enable_gqa), for TP and SP, MHA and GQA, on 2
  ranks, and GQA for TP and SP on 4; GQA with one and with two key/value heads per rank (a wrong
  head-to-group mapping shows only with two). MQA on 2 ranks (kv_heads < p) is refused with
  ValueError, as Megatron-Core refuses it.
  The performance checks on the same runs are in test_tensor_parallel_perf.py: the collectives
  (two all-reduces of s*b*h each way for TP; for SP two all-gathers and two reduce-scatters in
  forward, four all-gathers and two reduce-scatters in backward), the bytes each rank sends, the
  bytes the LayerNorms and the whole block save for backward.
  The same layers within process groups of a larger world are in test_tensor_parallel_groups.py.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
import torch.nn.functional as F

from grader.suites.tensor_parallel.reference import (
    BLOCK_CASES,
    assemble_grads,
    chunk,
    counted,
    describe_calls,
    make_state,
    run_block,
)
from grader.testing import assert_matches, expect_exception, generator

TOL = (1e-10, 1e-10)  # float64; sums over ranks and heads in another order differ by ~1e-15


# ------------------------------------------------------------------ linear layers


@dataclass(frozen=True)
class LinearCase:
    kind: str  # "column" or "row"
    flag: bool  # gather_output (column) or input_is_parallel (row)
    bias: bool
    sequence_parallel: bool
    world_size: int = 2
    in_features: int = 6
    out_features: int = 10
    rows: int = 4  # sequence positions (dimension 0), then a batch of 3

    @property
    def id(self) -> str:
        flag = ("gather_output" if self.kind == "column" else "input_is_parallel") + f"={self.flag}"
        extra = ("-bias" if self.bias else "-no_bias") + ("-sp" if self.sequence_parallel else "")
        return f"{self.kind}-{flag}{extra}-world={self.world_size}"


LINEAR_CASES = [
    LinearCase("column", False, True, False),
    LinearCase("column", True, True, False),
    LinearCase("column", False, False, True),
    LinearCase("row", True, True, False),
    LinearCase("row", False, False, False),
    LinearCase("row", True, True, True),
    LinearCase("column", True, True, True, world_size=4, in_features=5, out_features=12, rows=8),
    LinearCase("row", False, True, False, world_size=4, in_features=12, out_features=5),
    # p = 3, not a power of two: the gathered output's and the split input's columns in thirds
    LinearCase("column", True, True, True, world_size=3, in_features=5, out_features=9, rows=6),
    LinearCase("row", False, True, False, world_size=3, in_features=9, out_features=4),
]


def linear_reference(case: LinearCase, weight, bias, x, grad_output):
    x = x.clone().requires_grad_(True)
    w = weight.clone().requires_grad_(True)
    b = bias.clone().requires_grad_(True) if bias is not None else None
    out = F.linear(x, w, b)
    out.backward(grad_output)
    return out.detach(), x.grad, w.grad, b.grad if b is not None else None


def linear_expected(case: LinearCase, rank: int, weight, bias, x, grad_output) -> dict:
    """What rank `rank` must hold: its input and output layouts, its shards of the gradients,
    and the collectives of each direction."""
    p, sp = case.world_size, case.sequence_parallel
    out, gx, gw, gb = linear_reference(case, weight, bias, x, grad_output)
    rows = slice(rank * case.rows // p, (rank + 1) * case.rows // p)
    whole = x.numel() if case.kind == "column" else out.numel()
    if case.kind == "column":
        cols = slice(rank * case.out_features // p, (rank + 1) * case.out_features // p)
        forward = {("all_gather", whole): 1} if sp else {}
        # SP: the input's chunk is gathered again for the weight's gradient (Megatron-Core's way)
        backward = {("all_gather", whole): 1, ("reduce_scatter", whole): 1} if sp else {("all_reduce", whole): 1}
        if case.flag:
            forward[("all_gather", out.numel())] = forward.get(("all_gather", out.numel()), 0) + 1
        return {
            "x": x[rows] if sp else x,
            "grad_output": grad_output if case.flag else grad_output[..., cols],
            "output": out if case.flag else out[..., cols],
            "grad_input": gx[rows] if sp else gx,
            "grad_weight": gw[cols],
            "grad_bias": gb[cols] if gb is not None else None,
            "forward": forward,
            "backward": backward,
        }
    cols = slice(rank * case.in_features // p, (rank + 1) * case.in_features // p)
    forward = {("reduce_scatter", whole): 1} if sp else {("all_reduce", whole): 1}
    backward = {("all_gather", whole): 1} if sp else {}
    if not case.flag:
        backward[("all_gather", x.numel())] = backward.get(("all_gather", x.numel()), 0) + 1
    # With sequence parallelism the bias is added to this rank's rows only: its gradient is theirs.
    grad_bias = None if gb is None else (grad_output[rows].sum((0, 1)) if sp else gb)
    return {
        "x": x[..., cols] if case.flag else x,
        "grad_output": grad_output[rows] if sp else grad_output,
        "output": out[rows] if sp else out,
        "grad_input": gx[..., cols] if case.flag else gx,
        "grad_weight": gw[:, cols],
        "grad_bias": grad_bias,
        "forward": forward,
        "backward": backward,
    }


@pytest.mark.points(2)
@pytest.mark.parametrize("case", LINEAR_CASES, ids=[c.id for c in LINEAR_CASES])
def test_parallel_linear_matches_nn_linear_on_the_whole_weight(submission, case):
    gen = generator("tp-linear", case.id)
    weight = torch.randn(case.out_features, case.in_features, generator=gen, dtype=torch.float64)
    bias = torch.randn(case.out_features, generator=gen, dtype=torch.float64) if case.bias else None
    x = torch.randn(case.rows, 3, case.in_features, generator=gen, dtype=torch.float64)
    grad_output = torch.randn(case.rows, 3, case.out_features, generator=gen, dtype=torch.float64)
    wanted = [linear_expected(case, r, weight, bias, x, grad_output) for r in range(case.world_size)]
    args = [
        (case.kind, case.in_features, case.out_features, case.flag, weight, bias, w["x"], w["grad_output"])
        for w in wanted
    ]
    result = submission.function("linear_step").spmd(
        case.world_size, args, {"sequence_parallel": case.sequence_parallel}
    )
    for rank, (got, want) in enumerate(zip(result.outputs, wanted)):
        where = f"{case.id}, rank {rank}"
        # the collectives first: a wrong or missing one is the cause of the wrong values it leads to
        for phase in ("forward", "backward"):
            assert counted(got[phase]) == want[phase], (
                f"{where}: {phase} expected {describe_calls([k for k, n in want[phase].items() for _ in range(n)])} "
                f"(Megatron-Core's {_megatron_name(case)}), got {describe_calls(got[phase])}"
                f"{_collective_hint(case, phase, counted(got[phase]), want[phase])}"
            )
        for key in ("output", "grad_input", "grad_weight"):
            assert_matches(got[key], want[key], f"{where}: {key}", *TOL)
        shard_bytes = want["grad_weight"].numel() * 8
        assert got["weight_storage_bytes"] == shard_bytes, (
            f"{where}: self.weight's storage holds {got['weight_storage_bytes']} bytes; its shard is {shard_bytes}. "
            f"Keep a copy of the shard (e.g. weight[rows].clone()), not a view that keeps the full weight alive"
        )
        if want["grad_bias"] is None:
            assert got["grad_bias"] is None, f"{where}: bias=None must give a layer without a bias"
        else:
            assert_matches(got["grad_bias"], want["grad_bias"], f"{where}: grad_bias", *TOL)


def _megatron_name(case: LinearCase) -> str:
    """The Megatron-Core layer (and flags) whose collectives a case expects."""
    layer = "ColumnParallelLinear" if case.kind == "column" else "RowParallelLinear"
    flag = ("gather_output" if case.kind == "column" else "input_is_parallel") + f"={case.flag}"
    return f"{layer}, {flag}" + (", sequence_parallel=True" if case.sequence_parallel else "")


def _collective_hint(case: LinearCase, phase: str, got: dict, want: dict) -> str:
    """Where a wrong collective comes from, for the usual mistakes."""
    kinds_got, kinds_want = {k for k, _ in got}, {k for k, _ in want}
    if case.kind == "column" and phase == "backward" and not case.sequence_parallel and "all_reduce" not in kinds_got:
        return ": the input enters through copy_to_tp_region (f), whose backward all-reduces x's gradient"
    if case.kind == "row" and phase == "forward" and not case.sequence_parallel and "all_reduce" not in kinds_got:
        return ": the partial products are summed with reduce_from_tp_region (g), an all-reduce"
    if case.sequence_parallel and kinds_got != kinds_want:
        return (
            ": with sequence_parallel the column layer all-gathers its input's chunks (and again in backward, then "
            "reduce-scatters x's gradient); the row layer reduce-scatters its output (its backward all-gathers)"
        )
    return ""


BAD_LINEAR = {
    "column-out_features-not-a-multiple-of-p": ("column", 4, 5, (5, 4)),
    "row-in_features-not-a-multiple-of-p": ("row", 5, 4, (4, 5)),
    "column-weight-of-the-wrong-shape": ("column", 4, 6, (4, 6)),
    "row-weight-of-the-wrong-shape": ("row", 6, 4, (6, 4)),
}


@pytest.mark.points(1)
@pytest.mark.parametrize("case", list(BAD_LINEAR))
def test_parallel_linear_refuses_sizes_that_do_not_split_or_match(submission, case):
    kind, in_features, out_features, shape = BAD_LINEAR[case]
    weight = torch.ones(shape, dtype=torch.float64)
    x = torch.ones(2, in_features, dtype=torch.float64)
    args = (kind, in_features, out_features, True, weight, None, x, x)
    try:
        expect_exception("ValueError", lambda: submission.function("linear_step").spmd(2, [args, args]))
    except AssertionError as error:
        layer = "ColumnParallelLinear" if kind == "column" else "RowParallelLinear"
        raise AssertionError(
            f"{layer}({in_features}, {out_features}) with a weight of shape {shape} on 2 ranks: {error}"
        ) from None


@pytest.mark.points(1)
def test_parallel_linear_refuses_a_bias_of_the_wrong_shape(submission):
    weight, bias = torch.ones(4, 6, dtype=torch.float64), torch.ones(6, dtype=torch.float64)
    args = ("column", 6, 4, False, weight, bias, torch.ones(2, 6, dtype=torch.float64), torch.ones(2, 2))
    try:
        expect_exception("ValueError", lambda: submission.function("linear_step").spmd(2, [args, args]))
    except AssertionError as error:
        raise AssertionError(f"ColumnParallelLinear(6, 4) with a bias of shape (6,): {error}") from None


# ------------------------------------------------------------------ the block


@pytest.mark.points(4)
@pytest.mark.parametrize("case", BLOCK_CASES, ids=[c.id for c in BLOCK_CASES])
def test_parallel_block_matches_one_process(submission, case):
    result, reference = run_block(submission, case)
    got = result.outputs
    sizes = f"s={case.seq}, b={case.batch}, h={case.hidden}, heads={case.heads}, kv_heads={case.kv_heads}"
    p, sp = case.world_size, case.sequence_parallel
    if case.heads != case.kv_heads and case.kv_heads // p > 1:
        sizes += (
            f"; {case.kv_heads // p} key/value heads per rank: query head i reads key/value head "
            f"i // (heads / kv_heads), {case.heads // case.kv_heads} consecutive query heads per group"
        )
    where = f"ParallelBlock, {case.id} ({sizes})"
    for key in ("output", "grad_input"):
        for rank in range(p):
            want = chunk(reference[key], p, rank) if sp else reference[key]
            what = "its chunk of the sequence" if sp else "whole"
            assert_matches(got[rank][key], want, f"{where}: rank {rank}'s {key} ({what})", *TOL)
    try:
        grads = assemble_grads([g["grads"] for g in got], case.heads, case.kv_heads, sp)
    except KeyError as missing:
        raise AssertionError(
            f"{where}: no gradient for parameter {missing} (the layout of the ParallelBlock docstring: ln1, "
            f"attention.qkv, attention.proj, ln2, mlp.fc1, mlp.fc2)"
        ) from None
    how = (
        "summed over ranks if whole: with sequence parallelism each rank's gradient of ln1, ln2, attention.proj.bias "
        "and mlp.fc2.bias covers its own positions only"
        if sp
        else "from rank 0 if whole"
    )
    for name, want in reference["grads"].items():
        assert_matches(grads[name], want, f"{where}: gradient of {name}, rebuilt from the ranks' shards ({how})", *TOL)


BAD_BLOCKS = {
    "hidden-not-a-multiple-of-heads": (18, 4, 2, 32),
    "kv_heads-not-a-multiple-of-p": (16, 4, 1, 32),  # MQA on 2 ranks: Megatron-Core refuses it too
    "heads-not-a-multiple-of-p": (18, 3, 3, 32),
    "heads-not-a-multiple-of-kv_heads": (24, 6, 4, 32),
    "ffn_hidden-not-a-multiple-of-p": (16, 4, 2, 33),
}


@pytest.mark.points(1)
@pytest.mark.parametrize("case", list(BAD_BLOCKS))
def test_parallel_block_refuses_heads_that_do_not_split(submission, case):
    hidden, heads, kv_heads, ffn = BAD_BLOCKS[case]
    state = make_state(hidden, heads, kv_heads, ffn, "bad")
    x = torch.zeros(4, 1, hidden, dtype=torch.float64)
    args = (hidden, heads, kv_heads, ffn, state, x, x, False)
    try:
        expect_exception("ValueError", lambda: submission.function("block_step").spmd(2, [args, args]))
    except AssertionError as error:
        raise AssertionError(
            f"ParallelBlock(hidden={hidden}, heads={heads}, kv_heads={kv_heads}, ffn_hidden={ffn}) on 2 ranks: {error}"
        ) from None
