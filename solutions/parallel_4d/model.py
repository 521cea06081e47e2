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

The first four functions are the communicating pieces, each taking the group it works in:
module tensor_parallel's regions and vocab-parallel loss and module context_parallel's
all-gathered K/V. Bring your own from those modules (they fit as they are, or with a rename),
or write them again here.
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


def copy_to_tp_region(x: torch.Tensor, group: dist.ProcessGroup) -> torch.Tensor:
    """Megatron's f (module tensor_parallel): x unchanged forward; backward, the gradient summed
    over `group` with one all-reduce."""
    ### BEGIN SOLUTION
    return _CopyToRegion.apply(x, group)
    ### END SOLUTION


def reduce_from_tp_region(x: torch.Tensor, group: dist.ProcessGroup) -> torch.Tensor:
    """Megatron's g (module tensor_parallel): x summed over `group` with one all-reduce forward;
    backward, the gradient unchanged."""
    ### BEGIN SOLUTION
    return _ReduceFromRegion.apply(x, group)
    ### END SOLUTION


def all_gather_sequence(x: torch.Tensor, group: dist.ProcessGroup) -> torch.Tensor:
    """(b, h, s_local, d) -> (b, h, p*s_local, d): every member's x along dimension 2, in
    group-rank order, with one all-gather (p = the size of `group`). Backward, one reduce-scatter
    of the gradient: each rank keeps the sum over the group of its own block's gradient (module
    context_parallel's all-gathered K/V)."""
    ### BEGIN SOLUTION
    return _GatherSequence.apply(x, group)
    ### END SOLUTION


def vocab_parallel_cross_entropy(
    logits: torch.Tensor, targets: torch.Tensor, vocab_start: int, group: dist.ProcessGroup
) -> torch.Tensor:
    """Per-token cross-entropy (the shape of `targets`) from this rank's vocabulary shard of the
    logits (..., V/tp), which holds vocabulary ids [vocab_start, vocab_start + V/tp) (module
    tensor_parallel's vocab_parallel_cross_entropy). The logits are never gathered: exactly three
    all-reduces over `group`, each of one number per token (the largest logit, with
    ReduceOp.MAX; the sum of the exponentials; the target's logit, found on the one rank whose
    shard holds it). Backward communicates nothing: softmax minus one-hot, on the local shard."""
    ### BEGIN SOLUTION
    return _VocabParallelCrossEntropy.apply(logits, targets, vocab_start, group)
    ### END SOLUTION


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
    ### BEGIN SOLUTION
    return _Stage(model, grid, rank, groups)


def _chunk(tensor: torch.Tensor, parts: int, index: int, dim: int) -> nn.Parameter:
    return nn.Parameter(tensor.detach().chunk(parts, dim)[index].clone())


class _Stage(nn.Module):
    def __init__(self, model: TinyGPT, grid: RankGrid, rank: int, groups: dict[str, dist.ProcessGroup]) -> None:
        super().__init__()
        config = model.config
        tp, pp = grid.sizes["tp"], grid.sizes["pp"]
        for name, size in (("num_kv_heads", config.num_kv_heads), ("vocab_size", config.vocab_size)):
            if size % tp:
                raise ValueError(f"parallelize: tp = {tp} must divide {name} = {size}")
        if config.num_layers % pp:
            raise ValueError(f"parallelize: pp = {pp} must divide num_layers = {config.num_layers}")
        self.config, self.tp_group, self.cp_group = config, groups["tp"], groups["cp"]
        self.t, self.tp = grid.coordinate("tp", rank), tp
        self.c, self.cp = grid.coordinate("cp", rank), grid.sizes["cp"]
        stage = grid.coordinate("pp", rank)
        self.first, self.last = stage == 0, stage == pp - 1
        self.heads, self.kv_heads = config.num_heads // tp, config.num_kv_heads // tp
        self.vocab_start = self.t * config.vocab_size // tp

        if self.first or self.last:  # the tied embedding: vocabulary rows of this tp rank
            self.token_embedding = nn.Embedding(config.vocab_size // tp, config.d_model)
            self.token_embedding.weight = _chunk(model.token_embedding.weight, tp, self.t, 0)
        if self.first:
            self.position_embedding = nn.Embedding(config.max_seq_len, config.d_model)
            self.position_embedding.weight = nn.Parameter(model.position_embedding.weight.detach().clone())
        per_stage = config.num_layers // pp
        layers = range(stage * per_stage, (stage + 1) * per_stage)
        self.blocks = nn.ModuleDict({str(i): self._shard_block(model.blocks[i]) for i in layers})
        if self.last:
            self.norm = copy.deepcopy(model.norm)

    def _shard_block(self, whole: nn.Module) -> nn.Module:
        block = copy.deepcopy(whole)
        attention, mlp, t, tp = block.attention, block.mlp, self.t, self.tp
        attention.query.weight = _chunk(attention.query.weight, tp, t, 0)
        kv = attention.key_value.weight.detach().view(2, self.config.num_kv_heads, self.config.head_dim, -1)
        attention.key_value.weight = nn.Parameter(kv.chunk(tp, 1)[t].reshape(-1, kv.shape[-1]).clone())
        attention.out.weight = _chunk(attention.out.weight, tp, t, 1)
        mlp[0].weight, mlp[0].bias = _chunk(mlp[0].weight, tp, t, 0), _chunk(mlp[0].bias, tp, t, 0)
        mlp[2].weight = _chunk(mlp[2].weight, tp, t, 1)
        return block

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        s_local = inputs.shape[1]
        positions = torch.arange(self.c * s_local, (self.c + 1) * s_local)
        x = self._embed(inputs, positions) if self.first else inputs
        for block in self.blocks.values():
            x = x + self._attention(block, block.norm_attention(x), positions)
            x = x + self._mlp(block.mlp, block.norm_mlp(x))
        if not self.last:
            return x
        h = copy_to_tp_region(self.norm(x), self.tp_group)
        return h @ self.token_embedding.weight.T  # (b, s_local, V/tp): this rank's vocabulary

    def _embed(self, ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        local = ids - self.vocab_start
        inside = (local >= 0) & (local < self.token_embedding.weight.shape[0])
        rows = self.token_embedding(local.clamp(0, self.token_embedding.weight.shape[0] - 1))
        rows = rows * inside.unsqueeze(-1)  # ids of another rank's vocabulary embed to 0 here
        return reduce_from_tp_region(rows, self.tp_group) + self.position_embedding(positions)

    def _attention(self, block: nn.Module, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        attention, config = block.attention, self.config
        b, s_local, _ = x.shape
        x = copy_to_tp_region(x, self.tp_group)
        q = attention.query(x).view(b, s_local, self.heads, config.head_dim).transpose(1, 2)
        k, v = attention.key_value(x).view(b, s_local, 2, self.kv_heads, config.head_dim).unbind(2)
        # Every position's K and V from the cp group: (b, kv_heads/tp, S, head_dim).
        k = all_gather_sequence(k.transpose(1, 2), self.cp_group)
        v = all_gather_sequence(v.transpose(1, 2), self.cp_group)
        repeat = self.heads // self.kv_heads
        k, v = k.repeat_interleave(repeat, dim=1), v.repeat_interleave(repeat, dim=1)
        scores = q @ k.transpose(-2, -1) / math.sqrt(config.head_dim)
        future = torch.arange(k.shape[2])[None, :] > positions[:, None]  # causal, by global position
        y = F.softmax(scores.masked_fill(future, float("-inf")), dim=-1) @ v
        y = attention.out(y.transpose(1, 2).reshape(b, s_local, -1))  # a partial sum over heads
        return reduce_from_tp_region(y, self.tp_group)

    def _mlp(self, mlp: nn.Sequential, x: torch.Tensor) -> torch.Tensor:
        x = copy_to_tp_region(x, self.tp_group)
        partial = F.linear(F.gelu(mlp[0](x)), mlp[2].weight)
        return reduce_from_tp_region(partial, self.tp_group) + mlp[2].bias  # the bias once, after the sum

    ### END SOLUTION


### BEGIN SOLUTION
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


### END SOLUTION
