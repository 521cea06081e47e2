# Your working copy: replace every `raise NotImplementedError` with your implementation.
# (Generated from the course's reference by `python -m grader sync`.)
"""The vocabulary split over the ranks: the embedding and the cross-entropy loss (lecture 07,
section 7).

With a vocabulary of V tokens, the input embedding (V, h) and the output projection's logits
(tokens, V) are the largest tensors of a small model. Rank r keeps the vocabulary slice
[r*V/p, (r+1)*V/p):

- embedding: each rank looks up the tokens of its slice (zeros for the others) and one
  all-reduce sums the p partial results;
- loss: the softmax needs the whole row of logits, but only through three numbers per token,
  each an all-reduce of `tokens` elements: the max (for stability), the sum of exponentials,
  and the target's logit (held by one rank). No rank ever holds the tokens x V logits.

Both split over the p ranks of `group` (None: the default group), rank r being a rank's index
in it (dist.get_rank(group)).

    loss_i = log(sum_j exp(z_ij - m_i)) - (z_{i,t_i} - m_i),    m_i = max_j z_ij
    d loss_i / d z_ij = softmax(z_i)_j - [j == t_i]
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from comm import CollectiveCounter, reduce_from_tp_region
from torch import nn


class VocabParallelEmbedding(nn.Module):
    """Rank r's rows [r*V/p, (r+1)*V/p) of `weight` (num_embeddings V, embedding_dim), kept as
    the nn.Parameter `self.weight` (V/p, embedding_dim), a copy: the full table given is not
    kept. p is the size of `group` (None: the default group), r this rank's index in it.

    forward(ids): ids an integer tensor of any shape, values in [0, V); each rank looks up the ids
    of its slice (zeros for the others), and reduce_from_tp_region(partial, group) sums the partial results, so
    the output (*ids.shape, embedding_dim) is the same on every rank and equals
    F.embedding(ids, full weight). Backward: this rank's weight.grad is its rows of the full
    embedding's gradient (rows of ids outside the slice get nothing).

    Raises ValueError when num_embeddings is not a multiple of p or weight has another shape than
    (num_embeddings, embedding_dim).
    """

    def __init__(
        self, num_embeddings: int, embedding_dim: int, *, weight: torch.Tensor, group: dist.ProcessGroup | None = None
    ) -> None:
        super().__init__()
        raise NotImplementedError("implement VocabParallelEmbedding.__init__ (lectures/07-tensor-parallelism.md, section 7)")

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError("implement VocabParallelEmbedding.forward (lectures/07-tensor-parallelism.md, section 7)")


def vocab_parallel_cross_entropy(
    logits_shard: torch.Tensor,
    targets: torch.Tensor,
    ignore_index: int = -100,
    group: dist.ProcessGroup | None = None,
) -> torch.Tensor:
    """Per-token cross-entropy losses of logits split by vocabulary over the p ranks of `group`
    (None: the default group): logits_shard (..., V/p), of any leading shape ((s, b, V/p) or
    (tokens, V/p)), holds group rank r's columns [r*V/p, (r+1)*V/p) of the logits; targets (...)
    the target ids, the same on every rank. Returns a tensor of targets' shape, the same on every
    rank, equal to F.cross_entropy on the whole logits (moved to dimension 1) with
    reduction="none" and this ignore_index: the loss is 0 where the target is ignore_index, and
    so is the gradient there. Differentiable with respect to logits_shard: its gradient (of
    logits_shard's dtype) is this rank's columns of the full gradient (softmax minus one-hot,
    times the output's gradient), computed without communication in backward.

    16-bit logits (float16, bfloat16) are computed in float32, as F.cross_entropy on the logits
    upcast to float32 and as Megatron-Core do: the losses are then float32. Float32 and float64
    logits give losses of their own dtype.

    Three all-reduces of `tokens` elements each in forward (tokens = targets.numel()): the max of
    each row (subtracted before exp: stable for logits of any size), the sum of exponentials,
    and the target's logit (only the rank whose slice holds the target contributes it). No
    tensor larger than tokens x V/p elements (plus a few of `tokens`) is ever made: a rank never
    holds the whole logits.

    Raises ValueError, before any communication (so that every rank of `group` raises, none
    waits), when targets' shape is not logits_shard's without its last dimension, or a target is
    neither ignore_index nor in [0, V), V = p * logits_shard.shape[-1].
    """
    raise NotImplementedError("implement vocab_parallel_cross_entropy (lectures/07-tensor-parallelism.md, section 7)")


# (Write any helper functions you need here.)


def embedding_step(
    num_embeddings: int,
    weight: torch.Tensor,
    ids: torch.Tensor,
    grad_output: torch.Tensor,
    group: dist.ProcessGroup | None = None,
) -> dict[str, object]:
    """Given (the grader calls it on every rank of `group`): VocabParallelEmbedding(
    num_embeddings, weight.shape[1], weight=weight, group=group), out = embedding(ids),
    out.backward(grad_output). Returns
    "output", "grad" (this rank's weight.grad), "weight_storage_bytes" (the bytes of the storage
    behind embedding.weight) and the collectives counted in "forward" and in "backward"."""
    embedding = VocabParallelEmbedding(num_embeddings, weight.shape[1], weight=weight, group=group)
    with CollectiveCounter() as forward:
        out = embedding(ids)
    with CollectiveCounter() as backward:
        out.backward(grad_output)
    return {
        "output": out.detach(),
        "grad": embedding.weight.grad,
        "weight_storage_bytes": embedding.weight.untyped_storage().nbytes(),
        "forward": forward.calls,
        "backward": backward.calls,
    }


def cross_entropy_step(
    logits_shard: torch.Tensor,
    targets: torch.Tensor,
    grad_output: torch.Tensor,
    ignore_index: int = -100,
    group: dist.ProcessGroup | None = None,
) -> dict[str, object]:
    """Given (the grader calls it on every rank of `group`): losses = vocab_parallel_cross_entropy(
    logits_shard, targets, ignore_index, group), losses.backward(grad_output). Returns "loss" (the
    losses), "grad" (the gradient of logits_shard) and the collectives counted in "forward" and in
    "backward"."""
    logits = logits_shard.detach().requires_grad_(True)
    with CollectiveCounter() as forward:
        losses = vocab_parallel_cross_entropy(logits, targets, ignore_index, group)
    with CollectiveCounter() as backward:
        losses.backward(grad_output)
    return {"loss": losses.detach(), "grad": logits.grad, "forward": forward.calls, "backward": backward.calls}
