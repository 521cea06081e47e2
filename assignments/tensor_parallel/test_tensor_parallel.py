"""Public tests for the tensor_parallel module: run them while you work with

    pytest assignments/tensor_parallel                  (add -s to see what your code prints)

Your functions run in worker processes, never inside pytest; everything distributed runs on
worlds of 2 and 4 gloo processes through the given helpers region_step, linear_step, block_step,
embedding_step and cross_entropy_step, which also count the collectives you call through
torch.distributed. One test runs the embedding in two process groups of 2 side by side in a
world of 4 (Group((0, 2)) and Group((1, 3))): pass `group=` to every collective and take your
shard by dist.get_rank(group). The hidden suite checks more: every operator and layer both ways,
the block with sequence parallelism and GQA, every operator, the block and the loss within
process groups, bad sizes and bad targets, the loss on 3-D and 16-bit logits with ignore_index,
the bytes each rank sends (read from the kernel), what the LayerNorms and the whole block save
for backward (the ParallelBlock docstring's figure), the largest tensor of the loss, and the
paper's figures of tp_activation_bytes. `make grade` gives the score.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from grader.sandbox import Group, Step
from grader.testing import assert_matches, generator

TOL = (1e-10, 1e-10)


def test_copy_to_tp_region_is_the_identity_forward_and_an_all_reduce_backward(submission):
    gen = generator("public-copy")
    xs = [torch.randn(3, 4, generator=gen, dtype=torch.float64) for _ in range(2)]
    grads = [torch.randn(3, 4, generator=gen, dtype=torch.float64) for _ in range(2)]
    result = submission.function("region_step").spmd(2, [("copy_to_tp_region", x, g) for x, g in zip(xs, grads)])
    for rank, got in enumerate(result.outputs):
        assert_matches(got["output"], xs[rank], f"rank {rank}: forward is the identity")
        assert_matches(got["grad"], grads[0] + grads[1], f"rank {rank}: backward sums the gradients", *TOL)
        assert got["forward"] == [] and got["backward"] == [("all_reduce", 12)], (
            f"rank {rank}: expected no collective in forward and one all_reduce of 12 elements in backward, got "
            f"{got['forward']} and {got['backward']}"
        )


def test_sequence_parallel_regions_on_4_ranks_gather_and_split_along_the_sequence(submission):
    """One world of 4 runs the three sequence-parallel operators one after another; each rank's
    x and output gradient differ (scatter's x is the same on every rank: it enters from a
    replicated tensor). Dimension 0 is the sequence: rank r's chunk is rows [r*n, (r+1)*n)."""
    p, n = 4, 2  # each rank's chunk: n rows of 3
    gen = generator("public-sequence-regions")
    chunks = [torch.randn(n, 3, generator=gen, dtype=torch.float64) for _ in range(p)]  # gather's x
    wholes = [torch.randn(p * n, 3, generator=gen, dtype=torch.float64) for _ in range(p)]  # reduce-scatter's x
    replicated = torch.randn(p * n, 3, generator=gen, dtype=torch.float64)  # scatter's x, on every rank
    grad_wholes = [torch.randn(p * n, 3, generator=gen, dtype=torch.float64) for _ in range(p)]
    grad_chunks = [torch.randn(n, 3, generator=gen, dtype=torch.float64) for _ in range(p)]
    steps = [
        [
            Step("region_step", ("gather_from_sequence_parallel_region", chunks[r], grad_wholes[r])),
            Step("region_step", ("reduce_scatter_to_sequence_parallel_region", wholes[r], grad_chunks[r])),
            Step("region_step", ("scatter_to_sequence_parallel_region", replicated, grad_chunks[r])),
        ]
        for r in range(p)
    ]
    ranks = submission.script_spmd(p, steps).steps
    mine = [slice(r * n, (r + 1) * n) for r in range(p)]  # rank r's rows of a whole sequence
    whole, gathered_grad = torch.cat(chunks), torch.cat(grad_chunks)
    summed, summed_grad = torch.stack(wholes).sum(0), torch.stack(grad_wholes).sum(0)
    size = p * n * 3  # elements of the whole (gathered or reduced) tensor
    want = {  # operator: (each rank's output, each rank's x.grad, forward collectives, backward collectives)
        "gather_from_sequence_parallel_region": (
            [whole] * p,
            [summed_grad[rows] for rows in mine],
            [("all_gather", size)],
            [("reduce_scatter", size)],
        ),
        "reduce_scatter_to_sequence_parallel_region": (
            [summed[rows] for rows in mine],
            [gathered_grad] * p,
            [("reduce_scatter", size)],
            [("all_gather", size)],
        ),
        "scatter_to_sequence_parallel_region": (
            [replicated[rows] for rows in mine],
            [gathered_grad] * p,
            [],
            [("all_gather", size)],
        ),
    }
    for i, (operator, (outputs, grads, forward, backward)) in enumerate(want.items()):
        for r in range(p):
            got, where = ranks[r][i], f"{operator} on 4 ranks, rank {r}"
            assert_matches(got["output"], outputs[r], f"{where}: forward output", *TOL)
            assert_matches(got["grad"], grads[r], f"{where}: x.grad after backward", *TOL)
            assert (got["forward"], got["backward"]) == (forward, backward), (
                f"{where}: expected {forward or 'no collective'} in forward and {backward} in backward "
                f"(kind, elements of the whole tensor), got {got['forward']} and {got['backward']}"
            )


def test_column_parallel_linear_keeps_its_rows_of_the_weight(submission):
    gen = generator("public-column")
    weight, bias = torch.randn(6, 4, generator=gen, dtype=torch.float64), torch.randn(6, generator=gen).double()
    x = torch.randn(5, 4, generator=gen, dtype=torch.float64)
    grad_output = torch.randn(5, 3, generator=gen, dtype=torch.float64)  # each rank: its 3 columns
    args = [("column", 4, 6, False, weight, bias, x, grad_output)] * 2
    result = submission.function("linear_step").spmd(2, args)
    full = F.linear(x, weight, bias)
    for rank, got in enumerate(result.outputs):
        assert_matches(got["output"], full[:, 3 * rank : 3 * rank + 3], f"rank {rank}: its 3 output columns", *TOL)
        assert_matches(got["grad_weight"], grad_output.T @ x, f"rank {rank}: the gradient of its rows", *TOL)
    summed = grad_output @ weight[:3] + grad_output @ weight[3:]  # each rank's partial gradient, summed
    for rank, got in enumerate(result.outputs):
        assert_matches(got["grad_input"], summed, f"rank {rank}: x.grad (summed over ranks by the f operator)", *TOL)


class Block(nn.Module):
    """The ParallelBlock's math on one process (MHA), attention written out."""

    def __init__(self, hidden: int, heads: int, ffn_hidden: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
        self.wq, self.wk, self.wv = (nn.Linear(hidden, hidden) for _ in range(3))
        self.proj = nn.Linear(hidden, hidden)
        self.fc1, self.fc2 = nn.Linear(hidden, ffn_hidden), nn.Linear(ffn_hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s, b, h = x.shape
        y = self.ln1(x)
        q, k, v = (w(y).view(s, b, self.heads, -1).permute(1, 2, 0, 3) for w in (self.wq, self.wk, self.wv))
        scores = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
        causal = torch.ones(s, s, dtype=torch.bool).tril()
        attention = scores.masked_fill(~causal, float("-inf")).softmax(-1) @ v
        x = x + self.proj(attention.permute(2, 0, 1, 3).reshape(s, b, h))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


def parallel_name(name: str) -> str:
    """The ParallelBlock's state name of a parameter of Block ("wq.weight" -> "attention.wq.weight")."""
    if name.startswith(("wq", "wk", "wv", "proj")):
        return f"attention.{name}"
    return f"mlp.{name}" if name.startswith("fc") else name


def test_tensor_parallel_block_matches_one_process_with_two_all_reduces_each_way(submission):
    hidden, heads, ffn, s, b = 8, 2, 16, 4, 2
    torch.manual_seed(0)
    reference = Block(hidden, heads, ffn).double()
    state = {parallel_name(k): v for k, v in reference.state_dict().items()}
    gen = generator("public-block")
    x = torch.randn(s, b, hidden, generator=gen, dtype=torch.float64)
    grad_output = torch.randn(s, b, hidden, generator=gen, dtype=torch.float64)
    result = submission.function("block_step").spmd(2, [(hidden, heads, heads, ffn, state, x, grad_output, False)] * 2)
    xr = x.clone().requires_grad_(True)
    out = reference(xr)
    out.backward(grad_output)
    for rank, got in enumerate(result.outputs):
        assert_matches(got["output"], out.detach(), f"rank {rank}: the block's output", *TOL)
        assert_matches(got["grad_input"], xr.grad, f"rank {rank}: x.grad", *TOL)
        assert_matches(got["grads"]["mlp.fc2.bias"], reference.fc2.bias.grad, f"rank {rank}: mlp.fc2.bias.grad", *TOL)
        half = slice(rank * ffn // 2, (rank + 1) * ffn // 2)
        assert_matches(got["grads"]["mlp.fc1.weight"], reference.fc1.weight.grad[half], f"rank {rank}: fc1 rows", *TOL)
        for phase in ("forward", "backward"):
            assert got[phase] == [("all_reduce", s * b * hidden)] * 2, (
                f"rank {rank}: {phase} should make 2 all_reduce of {s * b * hidden} elements, made {got[phase]}"
            )


def test_vocab_parallel_embedding_in_two_groups_of_2_ranks_of_a_world_of_4(submission):
    """Ranks {0, 2} and {1, 3} each run a VocabParallelEmbedding of 8 tokens (4 per rank) at the
    same time, each group with its own table and ids; global rank 3 is rank 1 of Group((1, 3))."""
    vocab, dim, groups = 8, 3, ((0, 2), (1, 3))
    data: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}
    for group in groups:
        gen = generator("public-embedding", group)
        weight = torch.randn(vocab, dim, generator=gen, dtype=torch.float64)
        ids = torch.randint(0, vocab, (2, 5), generator=gen)
        data[group] = (weight, ids, torch.randn(2, 5, dim, generator=gen, dtype=torch.float64))
    args: list[tuple] = [()] * 4
    for group in groups:
        for rank in group:
            args[rank] = (vocab, *data[group], Group(group))
    result = submission.function("embedding_step").spmd(4, args)
    for group in groups:
        weight, ids, grad_output = data[group]
        table = weight.clone().requires_grad_(True)
        F.embedding(ids, table).backward(grad_output)
        for g, rank in enumerate(group):
            got = result.outputs[rank]
            where = f"VocabParallelEmbedding in Group({group}), global rank {rank} (group rank {g})"
            hint = "communicate within `group`; r = dist.get_rank(group) keeps rows [r*V/p, (r+1)*V/p)"
            assert_matches(got["output"], F.embedding(ids, weight), f"{where}: output, F.embedding ({hint})", *TOL)
            rows = f"rows {4 * g} to {4 * g + 3} of the table's gradient"
            assert_matches(got["grad"], table.grad[4 * g : 4 * g + 4], f"{where}: weight.grad, {rows} ({hint})", *TOL)
            assert got["weight_storage_bytes"] == 4 * dim * 8, (
                f"{where}: self.weight's storage holds {got['weight_storage_bytes']} bytes, expected {4 * dim * 8} "
                f"(a copy of its 4 rows, not a view into the whole table)"
            )
            assert got["forward"] == [("all_reduce", ids.numel() * dim)] and got["backward"] == [], (
                f"{where}: expected one all_reduce of {ids.numel() * dim} elements in forward and no collective in "
                f"backward, got {got['forward']} and {got['backward']}"
            )


def test_vocab_parallel_cross_entropy_matches_f_cross_entropy(submission):
    gen = generator("public-loss")
    logits = torch.randn(6, 8, generator=gen, dtype=torch.float64)
    targets = torch.tensor([0, 7, 3, 4, 1, 6])
    grad_output = torch.ones(6, dtype=torch.float64)
    args = [(shard.contiguous(), targets, grad_output) for shard in logits.chunk(2, dim=1)]
    result = submission.function("cross_entropy_step").spmd(2, args)
    z = logits.clone().requires_grad_(True)
    losses = F.cross_entropy(z, targets, reduction="none")
    losses.backward(grad_output)
    for rank, got in enumerate(result.outputs):
        assert_matches(got["loss"], losses.detach(), f"rank {rank}: per-token losses", *TOL)
        assert_matches(got["grad"], z.grad[:, 4 * rank : 4 * rank + 4], f"rank {rank}: gradient of its shard", *TOL)


def test_tp_activation_bytes_of_gpt3_175b_on_8_ranks(submission):
    formula = submission.function("tp_activation_bytes")
    s, b, h, a, t = 2048, 1, 12288, 96, 8
    assert formula(s, b, h, a, 1) == s * b * h * (34 + 5 * a * s / h), "t = 1: no parallelism"
    assert formula(s, b, h, a, t, True, True) == s * b * h * 34 / t, "sequence parallelism + selective recompute"
