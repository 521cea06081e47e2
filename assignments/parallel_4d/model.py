# Your working copy: replace every `raise NotImplementedError` with your implementation.
# (Generated from the course's reference by `python -m grader sync`.)
"""This rank's part of TinyGPT under tensor, context and pipeline parallelism (lecture
12-4d-parallelism, section 4).

The model is the course's TinyGPT (grader/models/tiny_gpt.py): token and position embeddings,
pre-norm blocks of grouped-query attention and a GELU MLP, a final LayerNorm and an output head
tied to the token embedding. A rank at coordinates (t, c, d, s) of a RankGrid holds:

- pipeline stage s: blocks [s*L/pp, (s+1)*L/pp) of the L = num_layers blocks; the first stage
  also the token and position embeddings, the last stage also the final norm and the token
  embedding again, as the tied output head (both stages hold it when pp > 1);
- tensor-parallel shard t of tp (Megatron's layout, module tensor_parallel), row blocks taken
  with torch.chunk(tp, dim)[t]:

      token_embedding.weight                dim 0: vocab rows [t*V/tp, (t+1)*V/tp)
      attention.query.weight                dim 0: query heads [t*H/tp, (t+1)*H/tp)
      attention.key_value.weight            key/value heads [t*K/tp, (t+1)*K/tp) of both halves:
                                            viewed as (2, K, head_dim, d_model), dim 1
      attention.out.weight                  dim 1: the same query heads
      mlp.0.weight, mlp.0.bias              dim 0: hidden units [t*F/tp, (t+1)*F/tp)
      mlp.2.weight                          dim 1: the same hidden units
      everything else (norms, position_embedding, mlp.2.bias): whole, on every tp rank

- context-parallel shard c of cp: positions [c*S/cp, (c+1)*S/cp) of every sequence, contiguous;
  attention all-gathers K and V over the cp group (the given all_gather_sequence), as Llama 3
  does, and masks causally by global position;
- weights identical on every rank of its "dp-cp" group (data and context parallelism split the
  data, not the weights).

The given functions below are the course's versions of module tensor_parallel's regions and
vocab-parallel loss and module context_parallel's all-gathered K/V, each taking the group it
works in.
"""

from __future__ import annotations

import copy
import math

import torch
import torch.distributed as dist
import torch.nn.functional as F
from grid import RankGrid
from torch import nn

from grader.models.tiny_gpt import TinyGPT


class _CopyToRegion(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous()
        dist.all_reduce(grad, group=ctx.group)
        return grad, None


class _ReduceFromRegion(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        x = x.contiguous().clone()
        dist.all_reduce(x, group=group)
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad, None


def copy_to_tp_region(x: torch.Tensor, group: dist.ProcessGroup) -> torch.Tensor:
    """Identity forward; all-reduce of the gradient over `group` backward (module tensor_parallel)."""
    return _CopyToRegion.apply(x, group)


def reduce_from_tp_region(x: torch.Tensor, group: dist.ProcessGroup) -> torch.Tensor:
    """All-reduce (sum) over `group` forward; identity backward (module tensor_parallel)."""
    return _ReduceFromRegion.apply(x, group)


class _GatherSequence(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        parts = [torch.empty_like(x) for _ in range(dist.get_world_size(group))]
        dist.all_gather(parts, x.contiguous(), group=group)
        return torch.cat(parts, dim=2)

    @staticmethod
    def backward(ctx, grad):
        parts = [part.contiguous() for part in grad.chunk(dist.get_world_size(ctx.group), dim=2)]
        mine = torch.empty_like(parts[0])
        dist.reduce_scatter(mine, parts, group=ctx.group)
        return mine, None


def all_gather_sequence(x: torch.Tensor, group: dist.ProcessGroup) -> torch.Tensor:
    """(b, h, s_local, d) -> (b, h, p*s_local, d), the blocks in group-rank order; backward
    reduce-scatters the gradient, each rank keeping the sum for its own block (module
    context_parallel's all-gathered K/V)."""
    return _GatherSequence.apply(x, group)


class _VocabParallelCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, targets, vocab_start, group):
        # Three all-reduces of one number per token: the max, the sum of exponentials and the
        # target's logit, each found on the one rank whose vocabulary shard holds it.
        top = logits.max(dim=-1).values
        dist.all_reduce(top, op=dist.ReduceOp.MAX, group=group)
        shifted = logits - top.unsqueeze(-1)
        exp = shifted.exp()
        total = exp.sum(dim=-1)
        dist.all_reduce(total, group=group)
        local = targets - vocab_start
        inside = (local >= 0) & (local < logits.shape[-1])
        picked = shifted.gather(-1, local.clamp(0, logits.shape[-1] - 1).unsqueeze(-1)).squeeze(-1)
        picked = torch.where(inside, picked, torch.zeros_like(picked))
        dist.all_reduce(picked, group=group)
        softmax = exp / total.unsqueeze(-1)
        ctx.save_for_backward(softmax, local, inside)
        return total.log() - picked

    @staticmethod
    def backward(ctx, grad):
        softmax, local, inside = ctx.saved_tensors
        grad_logits = softmax.clone()
        rows = grad_logits.view(-1, grad_logits.shape[-1])
        hit = inside.view(-1).nonzero().squeeze(-1)
        rows[hit, local.view(-1)[hit]] -= 1
        return grad_logits * grad.unsqueeze(-1), None, None, None


def vocab_parallel_cross_entropy(
    logits: torch.Tensor, targets: torch.Tensor, vocab_start: int, group: dist.ProcessGroup
) -> torch.Tensor:
    """Per-token cross-entropy (the shape of `targets`) from this rank's vocabulary shard of the
    logits (..., V/tp), holding vocabulary ids [vocab_start, vocab_start + V/tp) (module
    tensor_parallel's vocab_parallel_cross_entropy)."""
    return _VocabParallelCrossEntropy.apply(logits, targets, vocab_start, group)


def parallelize(model: TinyGPT, grid: RankGrid, rank: int, groups: dict[str, dist.ProcessGroup]) -> nn.Module:
    """The part of `model` (a whole TinyGPT, the same weights on every rank) that `rank` holds,
    as an nn.Module (module docstring: which blocks, which shards). `groups` is build_groups'
    answer for this rank. The returned module:

    - state_dict(): exactly the parameters the rank holds, under the whole model's names
      ("token_embedding.weight", "blocks.2.mlp.0.bias", ...), each the rank's shard, copied
      (training it leaves `model` as it was);
    - forward(inputs): on the first stage `inputs` are token ids (b, S/cp) of this rank's
      positions; on later stages the hidden states (b, S/cp, d_model) the previous stage
      returned. Returns the hidden states after the stage's blocks, or, on the last stage, the
      logits of this rank's vocabulary shard (b, S/cp, V/tp): final norm, then the tied head.
      Token ids of the first stage must be embedded with this rank's vocabulary rows only (ids
      outside them give 0) and summed over the tp group; positions are global (c*S/cp + i).

    Raises ValueError unless pp divides num_layers, tp divides num_kv_heads (then it divides
    num_heads, d_model and the MLP's hidden size too) and tp divides vocab_size.
    """
    raise NotImplementedError("implement parallelize (lectures/12-4d-parallelism.md, section 4)")
