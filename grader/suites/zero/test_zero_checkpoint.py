"""Hidden suite: activation checkpointing. Gradients against the plain forward run in the same
worker (autograd on the same blocks); saved bytes counted by the given saved_bytes_and_grads
(torch.autograd.graph.saved_tensors_hooks during the forward, parameters excluded), which also
records the blocks backward recomputes, so that the groups themselves are seen."""

from __future__ import annotations

import pytest
import torch

from grader.sandbox import Saved, Step
from grader.testing import assert_matches, expect_exception, generator

WIDTH, ROWS = 8, 4
TOL = (1e-12, 1e-12)


def run(submission, num_blocks: int, segments: int | None, x: torch.Tensor) -> dict:
    steps = [
        Step("make_blocks", (num_blocks, WIDTH, 0), save_as="blocks", send_back=False),
        # checkpointed_forward alone first, so that a missing one is named as such
        *([Step("checkpointed_forward", (Saved("blocks"), x, segments), send_back=False)] if segments else []),
        Step("saved_bytes_and_grads", (num_blocks, WIDTH, 7, x, segments)),
    ]
    return submission.script(steps).steps[0][-1]


@pytest.mark.points(4)
@pytest.mark.parametrize(("num_blocks", "segments"), [(9, 3), (10, 3), (7, 3), (10, 4), (5, 1), (4, 4)])
def test_checkpointed_forward_gives_the_plain_forwards_output_and_gradients(submission, num_blocks, segments):
    x = torch.randn(ROWS, WIDTH, generator=generator("ckpt", num_blocks, segments), dtype=torch.float64)
    got, plain = run(submission, num_blocks, segments, x), run(submission, num_blocks, None, x)
    where = f"{num_blocks} blocks, {segments} segments"
    assert_matches(got["y"], plain["y"], f"{where}: output", *TOL)
    assert_matches(got["x_grad"], plain["x_grad"], f"{where}: gradient of x", *TOL)
    for i, (g, want) in enumerate(zip(got["grads"], plain["grads"])):
        assert g is not None, f"{where}: parameter {i} (block {i // 2}) got no gradient"
        assert_matches(g, want, f"{where}: gradient of parameter {i} (block {i // 2})", *TOL)


def recomputed_groups(order: list[int]) -> list[list[int]]:
    """Block indices recomputed in backward, cut into runs of consecutive blocks (one per group)."""
    groups: list[list[int]] = []
    for index in order:
        if groups and index == groups[-1][-1] + 1:
            groups[-1].append(index)
        else:
            groups.append([index])
    return groups


@pytest.mark.points(2)
@pytest.mark.parametrize(("num_blocks", "segments"), [(7, 3), (10, 4), (9, 3), (5, 1), (4, 4)])
def test_checkpointed_forward_recomputes_segments_groups_of_nearly_equal_size(submission, num_blocks, segments):
    """Backward reruns each group once, the last group first: its blocks, in order, are the
    groups. Exactly `segments` of them, covering every block once, sizes differing by at most one
    (7 blocks in 3: 2, 3, 2 or 3, 2, 2; never one group of 7 and two empty ones)."""
    x = torch.randn(ROWS, WIDTH, generator=generator("ckpt-groups", num_blocks, segments), dtype=torch.float64)
    order = run(submission, num_blocks, segments, x)["recomputed"]
    groups = recomputed_groups(order)
    sizes = [len(g) for g in groups]
    where = f"{num_blocks} blocks in {segments} segments"
    assert sorted(order) == list(range(num_blocks)), (
        f"{where}: backward recomputed blocks {order}; every block once expected (each group reruns its blocks once)"
    )
    assert len(groups) == segments and max(sizes) - min(sizes) <= 1, (
        f"{where}: backward recomputed groups {groups} (sizes {sizes}); expected {segments} consecutive groups of "
        f"{num_blocks // segments} or {-(-num_blocks // segments)} blocks"
    )


@pytest.mark.points(2)
def test_checkpointed_forward_rejects_more_segments_than_blocks(submission):
    steps = [
        Step("make_blocks", (3, WIDTH, 0), save_as="blocks", send_back=False),
        Step("checkpointed_forward", (Saved("blocks"), torch.zeros(2, WIDTH, dtype=torch.float64), 4)),
    ]
    expect_exception("ValueError", lambda: submission.script(steps))
