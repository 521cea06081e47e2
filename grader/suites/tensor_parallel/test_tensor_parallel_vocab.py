"""Hidden suite: VocabParallelEmbedding and vocab_parallel_cross_entropy on gloo worlds of 2 and 4
ranks, float64, against F.embedding and F.cross_entropy(reduction="none") on the whole
vocabulary (torch's own); the embedding's collectives counted by kind and size. The loss's
collectives and largest tensor are checked in test_tensor_parallel_perf.py."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from grader.sandbox import Step
from grader.suites.tensor_parallel.reference import counted, describe_calls
from grader.testing import assert_matches, expect_exception, generator

TOL = (1e-12, 1e-12)


def embedding_data(world_size: int, vocab: int, dim: int, *salt):
    gen = generator("tp-embedding", world_size, vocab, dim, *salt)
    weight = torch.randn(vocab, dim, generator=gen, dtype=torch.float64)
    ids = torch.randint(0, vocab, (5, 3), generator=gen)
    ids[0, :2] = torch.tensor([0, vocab - 1])  # both ends of the vocabulary
    return weight, ids, torch.randn(5, 3, dim, generator=gen, dtype=torch.float64)


def check_embedding(results: list[dict], weight, ids, grad_output, where: str) -> None:
    p = len(results)
    w = weight.clone().requires_grad_(True)
    out = F.embedding(ids, w)
    out.backward(grad_output)
    rows = weight.shape[0] // p
    for rank, got in enumerate(results):
        assert_matches(
            got["output"], out.detach(), f"{where}, rank {rank}: output (F.embedding on the whole table)", *TOL
        )
        assert_matches(
            got["grad"], w.grad[rank * rows : (rank + 1) * rows], f"{where}, rank {rank}: weight.grad (its rows)", *TOL
        )
        assert got["weight_storage_bytes"] == rows * weight.shape[1] * 8, (
            f"{where}, rank {rank}: self.weight's storage holds {got['weight_storage_bytes']} bytes; its {rows} rows "
            f"take {rows * weight.shape[1] * 8}. Keep a copy of the slice, not a view of the full table"
        )
        forward = {("all_reduce", out.numel()): 1}
        assert counted(got["forward"]) == forward and not got["backward"], (
            f"{where}, rank {rank}: forward made {describe_calls(got['forward'])}, backward "
            f"{describe_calls(got['backward'])}; expected one all_reduce of {out.numel()} elements, then none"
        )


@pytest.mark.points(3)
def test_vocab_parallel_embedding_matches_f_embedding_on_2_ranks(submission):
    weight, ids, grad_output = embedding_data(2, 12, 4)
    result = submission.function("embedding_step").spmd(2, [(12, weight, ids, grad_output)] * 2)
    check_embedding(result.outputs, weight, ids, grad_output, "VocabParallelEmbedding(12, 4) on 2 ranks")


@pytest.mark.points(1)
@pytest.mark.parametrize("case", ["vocabulary-not-a-multiple-of-p", "weight-of-the-wrong-shape"])
def test_vocab_parallel_embedding_refuses_a_vocabulary_that_does_not_split(submission, case):
    vocab, shape = (7, (7, 4)) if case.startswith("vocabulary") else (8, (6, 4))
    weight, ids = torch.ones(shape, dtype=torch.float64), torch.zeros(2, dtype=torch.long)
    args = (vocab, weight, ids, torch.ones(2, 4, dtype=torch.float64))
    try:
        expect_exception("ValueError", lambda: submission.function("embedding_step").spmd(2, [args, args]))
    except AssertionError as error:
        raise AssertionError(
            f"VocabParallelEmbedding({vocab}, 4) with a weight of shape {shape} on 2 ranks: {error}"
        ) from None


def loss_data(tokens: int, vocab: int, scale: float, *salt):
    gen = generator("tp-loss", tokens, vocab, scale, *salt)
    logits = scale * torch.randn(tokens, vocab, generator=gen, dtype=torch.float64)
    targets = torch.randint(0, vocab, (tokens,), generator=gen)
    targets[:2] = torch.tensor([0, vocab - 1])
    return logits, targets, torch.rand(tokens, generator=gen, dtype=torch.float64)


def loss_steps(world_size: int, logits, targets, grad_output, measure=()) -> list[list[Step]]:
    shards = logits.chunk(world_size, dim=1)
    return [
        [Step("cross_entropy_step", (shards[r].contiguous(), targets, grad_output), measure=measure)]
        for r in range(world_size)
    ]


def check_loss(results: list[dict], logits, targets, grad_output, where: str) -> None:
    p = len(results)
    z = logits.clone().requires_grad_(True)
    losses = F.cross_entropy(z, targets, reduction="none")
    losses.backward(grad_output)
    for rank, got in enumerate(results):
        assert_matches(
            got["loss"], losses.detach(), f"{where}, rank {rank}: losses (F.cross_entropy, reduction='none')", *TOL
        )
        assert_matches(
            got["grad"], z.grad.chunk(p, dim=1)[rank], f"{where}, rank {rank}: gradient of its logits shard", *TOL
        )


LOSS_CASES = {"world=2": (2, 1.0), "world=2-logits-of-1e4": (2, 1e4)}


@pytest.mark.points(3)
@pytest.mark.parametrize("case", list(LOSS_CASES))
def test_vocab_parallel_cross_entropy_matches_f_cross_entropy(submission, case):
    """Logits of size 1e4 overflow exp() unless the max is subtracted first."""
    world_size, scale = LOSS_CASES[case]
    logits, targets, grad_output = loss_data(24, 10, scale, case)
    result = submission.script_spmd(world_size, loss_steps(world_size, logits, targets, grad_output))
    check_loss([r[0] for r in result.steps], logits, targets, grad_output, f"vocab_parallel_cross_entropy, {case}")


@pytest.mark.points(4)
def test_vocab_embedding_and_loss_on_4_ranks(submission):
    """One world of 4 ranks runs the embedding (a vocabulary of 4: one row per rank) and the loss
    (one call)."""
    weight, ids, grad_embedding = embedding_data(4, 4, 3, "world4")
    logits, targets, grad_loss = loss_data(9, 20, 3.0, "world4")
    shards = logits.chunk(4, dim=1)
    steps = [
        [
            Step("embedding_step", (4, weight, ids, grad_embedding)),
            Step("cross_entropy_step", (shards[r].contiguous(), targets, grad_loss)),
        ]
        for r in range(4)
    ]
    ranks = submission.script_spmd(4, steps).steps
    check_embedding([r[0] for r in ranks], weight, ids, grad_embedding, "VocabParallelEmbedding(4, 3) on 4 ranks")
    check_loss([r[1] for r in ranks], logits, targets, grad_loss, "vocab_parallel_cross_entropy on 4 ranks")
