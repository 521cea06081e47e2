"""Hidden suite: the five communication operators (comm.py) on gloo worlds of 2 and 4 ranks,
through the given region_step (forward, backward, collectives counted by kind and size through
torch.distributed). Float64 inputs of random shapes, different on every rank; the expected values
are sums and concatenations computed here. The same operators within process groups of a larger
world are in test_tensor_parallel_groups.py."""

from __future__ import annotations

import pytest
import torch

from grader.sandbox import Step
from grader.suites.tensor_parallel.reference import counted, describe_calls
from grader.testing import assert_matches, expect_exception, generator, tolerance

OPERATORS = (
    "copy_to_tp_region",
    "reduce_from_tp_region",
    "gather_from_sequence_parallel_region",
    "reduce_scatter_to_sequence_parallel_region",
    "scatter_to_sequence_parallel_region",
)
SPLITTING = ("reduce_scatter_to_sequence_parallel_region", "scatter_to_sequence_parallel_region")


def inputs(
    operator: str, world_size: int, *salt: object, trailing: tuple[int, ...] = (2, 5)
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Each rank's x and the gradient of its output, float64: 3 rows (3p to split) of shape
    `trailing` (an odd one, or none: 1-D tensors). scatter_to_sequence_parallel_region enters
    from a replicated tensor: its x is the same on every rank."""
    gen = generator("tp-region", operator, world_size, *salt)
    rows = 3 * world_size if operator in SPLITTING else 3
    shape = (rows, *trailing)
    xs = [torch.randn(shape, generator=gen, dtype=torch.float64) for _ in range(world_size)]
    if operator == "scatter_to_sequence_parallel_region":
        xs = [xs[0]] * world_size
    out_rows = {"gather_from_sequence_parallel_region": rows * world_size}
    out_rows.update({op: rows // world_size for op in SPLITTING})
    out_shape = (out_rows.get(operator, rows), *trailing)
    grads = [torch.randn(out_shape, generator=gen, dtype=torch.float64) for _ in range(world_size)]
    return xs, grads


def expected(operator: str, xs: list[torch.Tensor], grads: list[torch.Tensor]) -> list[tuple]:
    """Per rank: (output, x.grad, forward collectives, backward collectives) by definition."""
    p, total, total_grad = len(xs), torch.stack(xs).sum(0), torch.stack(grads).sum(0)
    n = xs[0].numel()
    results = []
    for r in range(p):
        if operator == "copy_to_tp_region":
            results.append((xs[r], total_grad, {}, {("all_reduce", n): 1}))
        elif operator == "reduce_from_tp_region":
            results.append((total, grads[r], {("all_reduce", n): 1}, {}))
        elif operator == "gather_from_sequence_parallel_region":
            rows = xs[0].shape[0]
            mine = total_grad[r * rows : (r + 1) * rows]
            results.append((torch.cat(xs), mine, {("all_gather", p * n): 1}, {("reduce_scatter", p * n): 1}))
        elif operator == "reduce_scatter_to_sequence_parallel_region":
            results.append((total.chunk(p)[r], torch.cat(grads), {("reduce_scatter", n): 1}, {("all_gather", n): 1}))
        else:
            results.append((xs[r].chunk(p)[r], torch.cat(grads), {}, {("all_gather", n): 1}))
    return results


def check(operator: str, world_size: int, got: list[dict], xs, grads) -> None:
    rtol, atol = tolerance(torch.float64, world_size)
    for rank, (result, (output, grad, forward, backward)) in enumerate(zip(got, expected(operator, xs, grads))):
        where = f"{operator} on {world_size} ranks, rank {rank}"
        assert_matches(result["output"], output, f"{where}: forward output", rtol, atol)
        assert_matches(result["grad"], grad, f"{where}: x.grad after backward", rtol, atol)
        assert_matches(
            result["input_after_forward"], xs[rank], f"{where}: x after forward (the input must not be modified)"
        )
        for phase, want in (("forward", forward), ("backward", backward)):
            assert counted(result[phase]) == want, (
                f"{where}: {phase} made {describe_calls(result[phase])}; expected "
                f"{describe_calls([k for k, n in want.items() for _ in range(n)])} (through torch.distributed)"
            )


@pytest.mark.points(2)
@pytest.mark.parametrize("operator", OPERATORS)
def test_region_operator_matches_its_definition_on_2_ranks(submission, operator):
    xs, grads = inputs(operator, 2)
    result = submission.function("region_step").spmd(2, [(operator, x, g) for x, g in zip(xs, grads)])
    check(operator, 2, result.outputs, xs, grads)


@pytest.mark.points(3)
def test_every_region_operator_matches_its_definition_on_4_ranks(submission):
    """One world of 4 ranks runs the five operators one after another (one call), on 1-D tensors."""
    data = {op: inputs(op, 4, "world4", trailing=()) for op in OPERATORS}
    steps = [[Step("region_step", (op, data[op][0][r], data[op][1][r])) for op in OPERATORS] for r in range(4)]
    ranks = submission.script_spmd(4, steps).steps
    for i, op in enumerate(OPERATORS):
        check(op, 4, [ranks[r][i] for r in range(4)], *data[op])


@pytest.mark.points(1)
@pytest.mark.parametrize("operator", SPLITTING)
def test_sequence_parallel_split_refuses_rows_that_do_not_split(submission, operator):
    x = torch.randn(5, 3, dtype=torch.float64, generator=generator("tp-scatter-odd"))
    try:
        expect_exception("ValueError", lambda: submission.function("region_step").spmd(2, [(operator, x, x)] * 2))
    except AssertionError as error:
        raise AssertionError(f"{operator} of 5 rows on 2 ranks: {error}") from None
