"""Hidden suite: activation checkpointing. Gradients against the plain forward run in the same
worker (autograd on the same blocks); saved bytes counted by the given saved_bytes_and_grads
(torch.autograd.graph.saved_tensors_hooks during the forward, parameters excluded)."""

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


@pytest.mark.points(2)
def test_checkpointed_forward_rejects_more_segments_than_blocks(submission):
    steps = [
        Step("make_blocks", (3, WIDTH, 0), save_as="blocks", send_back=False),
        Step("checkpointed_forward", (Saved("blocks"), torch.zeros(2, WIDTH, dtype=torch.float64), 4)),
    ]
    expect_exception("ValueError", lambda: submission.script(steps))
