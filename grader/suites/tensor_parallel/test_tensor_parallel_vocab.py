"""Hidden suite: VocabParallelEmbedding and vocab_parallel_cross_entropy on gloo worlds of 2 and 4
ranks, float64, against F.embedding and F.cross_entropy(reduction="none") on the whole
vocabulary (torch's own); the embedding's collectives counted by kind and size. The loss also on
3-D logits, with ignore_index, in bfloat16 and float16 (against F.cross_entropy on the logits
upcast to float32), and bad targets. The loss's largest tensor is checked in
test_tensor_parallel_perf.py, both within process groups in test_tensor_parallel_groups.py."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest
import torch
import torch.nn.functional as F

from grader.sandbox import Step
from grader.suites.tensor_parallel.reference import counted, describe_calls
from grader.testing import assert_matches, expect_exception, generator, tolerance

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


# ------------------------------------------------------------------ the loss as logits come


def loss_reference(logits, targets, grad_output, ignore_index: int = -100):
    """F.cross_entropy(reduction="none") on the whole logits, classes moved to dimension 1 for
    leading shapes of more than one dimension, 16-bit logits upcast to float32 first (as
    Megatron-Core computes the loss): the losses and the gradient of the logits, of their dtype."""
    z = logits.to(torch.promote_types(logits.dtype, torch.float32)).requires_grad_(True)
    losses = F.cross_entropy(
        z.movedim(-1, 1) if z.dim() > 2 else z, targets, reduction="none", ignore_index=ignore_index
    )
    losses.backward(grad_output)
    return losses.detach(), z.grad.to(logits.dtype)


@dataclass(frozen=True)
class ShapeCase:
    leading: tuple[int, ...]  # the shape of targets
    vocab: int
    dtype: torch.dtype = torch.float64
    ignore_index: int = -100
    ignored: int = 0  # positions whose target is ignore_index
    world_size: int = 2

    @property
    def id(self) -> str:
        shape = "x".join(map(str, self.leading))
        extra = f"-ignore_index={self.ignore_index}x{self.ignored}" if self.ignored else ""
        dtype = str(self.dtype).removeprefix("torch.")
        return f"{shape}x{self.vocab // self.world_size}-{dtype}{extra}-world={self.world_size}"


SHAPE_CASES = [
    ShapeCase((5, 3), 12),  # (s, b, V/p): 3-D logits, sequence first
    ShapeCase((4, 4), 8),  # s = b = V/p: a layout mistake cannot hide behind a shape error
    ShapeCase((10,), 8, ignored=3),  # the default ignore_index, -100
    ShapeCase((3, 4), 16, ignore_index=5, ignored=4, world_size=4),  # an ignore_index inside the vocabulary
    ShapeCase((6, 2), 16, torch.bfloat16, ignored=2),
    ShapeCase((6, 2), 16, torch.float16),
]


def shape_case_data(case: ShapeCase):
    gen = generator("tp-loss-shape", case.id)
    tokens = math.prod(case.leading)
    logits = (3 * torch.randn(*case.leading, case.vocab, generator=gen, dtype=torch.float64)).to(case.dtype)
    targets = torch.randint(0, case.vocab, (tokens,), generator=gen)
    targets[0] = case.vocab - 1
    targets[torch.randperm(tokens, generator=gen)[: case.ignored]] = case.ignore_index
    loss_dtype = torch.promote_types(case.dtype, torch.float32)
    grad_output = torch.rand(case.leading, generator=gen, dtype=torch.float64).to(loss_dtype)
    return logits, targets.view(case.leading), grad_output


@pytest.mark.points(2)
@pytest.mark.parametrize("case", SHAPE_CASES, ids=[c.id for c in SHAPE_CASES])
def test_vocab_parallel_cross_entropy_takes_logits_of_any_shape_and_dtype(submission, case):
    """Against F.cross_entropy(reduction="none", ignore_index) on the whole logits: 3-D logits
    (s, b, V/p), s = b = V/p, ignored positions (loss 0, gradient 0), and 16-bit logits
    (losses in float32, the gradient in the logits' dtype); three all-reduces of tokens
    elements in forward, nothing in backward."""
    logits, targets, grad_output = shape_case_data(case)
    p = case.world_size
    shards = logits.chunk(p, dim=-1)
    steps = [
        [
            Step(
                "cross_entropy_step",
                (shards[r].contiguous(), targets, grad_output),
                {"ignore_index": case.ignore_index},
            )
        ]
        for r in range(p)
    ]
    ranks = submission.script_spmd(p, steps).steps
    losses, grad = loss_reference(logits, targets, grad_output, case.ignore_index)
    # 16-bit: the float32 sums run in another order; the gradient is rounded to 16 bits once
    loss_tol = TOL if case.dtype == torch.float64 else tolerance(torch.float32, case.vocab)
    grad_tol = TOL if case.dtype == torch.float64 else tolerance(case.dtype)
    where = f"vocab_parallel_cross_entropy, logits {tuple(logits.shape)} {case.dtype} on {p} ranks"
    ignored = targets == case.ignore_index
    for rank, got in enumerate(r[0] for r in ranks):
        assert_matches(
            got["loss"], losses, f"{where}, rank {rank}: losses (F.cross_entropy, reduction='none')", *loss_tol
        )
        if ignored.any():
            assert (got["loss"][ignored] == 0).all(), f"{where}, rank {rank}: losses at ignore_index must be 0"
        assert_matches(
            got["grad"], grad.chunk(p, dim=-1)[rank], f"{where}, rank {rank}: gradient of its shard", *grad_tol
        )
        tokens = targets.numel()
        assert counted(got["forward"]) == {("all_reduce", tokens): 3} and not got["backward"], (
            f"{where}, rank {rank}: forward made {describe_calls(got['forward'])}, backward "
            f"{describe_calls(got['backward'])}; expected 3 all_reduce of {tokens} elements (every token of the "
            f"leading shape), then nothing in backward"
        )


BAD_TARGETS = {
    "targets-of-another-shape": torch.tensor([0, 1, 2, 3, 4]),
    "a-target-equal-to-V": torch.tensor([0, 8, 2, 3, 4, 5]),
    "a-negative-target-that-is-not-ignore_index": torch.tensor([0, 1, -1, 3, 4, 5]),
}


@pytest.mark.points(1)
@pytest.mark.parametrize("case", list(BAD_TARGETS))
def test_vocab_parallel_cross_entropy_refuses_bad_targets_on_every_rank(submission, case):
    """Logits (6, 4) per rank, V = 8 on 2 ranks: every rank raises ValueError (a check on one
    rank alone would leave the other waiting in its all-reduce: a deadlock, not a ValueError)."""
    logits = torch.randn(6, 8, dtype=torch.float64, generator=generator("tp-loss-bad", case))
    targets = BAD_TARGETS[case]
    steps = [
        [Step("cross_entropy_step", (shard.contiguous(), targets, torch.ones(6, dtype=torch.float64)))]
        for shard in logits.chunk(2, dim=1)
    ]
    try:
        expect_exception("ValueError", lambda: submission.script_spmd(2, steps))
    except AssertionError as error:
        raise AssertionError(
            f"vocab_parallel_cross_entropy, logits (6, 4) per rank, targets {targets.tolist()}: {error}"
        ) from None
