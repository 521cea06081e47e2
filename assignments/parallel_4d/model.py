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
    raise NotImplementedError("implement copy_to_tp_region (lectures/12-4d-parallelism.md, section 4)")


def reduce_from_tp_region(x: torch.Tensor, group: dist.ProcessGroup) -> torch.Tensor:
    """Megatron's g (module tensor_parallel): x summed over `group` with one all-reduce forward;
    backward, the gradient unchanged."""
    raise NotImplementedError("implement reduce_from_tp_region (lectures/12-4d-parallelism.md, section 4)")


def all_gather_sequence(x: torch.Tensor, group: dist.ProcessGroup) -> torch.Tensor:
    """(b, h, s_local, d) -> (b, h, p*s_local, d): every member's x along dimension 2, in
    group-rank order, with one all-gather (p = the size of `group`). Backward, one reduce-scatter
    of the gradient: each rank keeps the sum over the group of its own block's gradient (module
    context_parallel's all-gathered K/V)."""
    raise NotImplementedError("implement all_gather_sequence (lectures/12-4d-parallelism.md, section 4)")


def vocab_parallel_cross_entropy(
    logits: torch.Tensor, targets: torch.Tensor, vocab_start: int, group: dist.ProcessGroup
) -> torch.Tensor:
    """Per-token cross-entropy (the shape of `targets`) from this rank's vocabulary shard of the
    logits (..., V/tp), which holds vocabulary ids [vocab_start, vocab_start + V/tp) (module
    tensor_parallel's vocab_parallel_cross_entropy). The logits are never gathered: exactly three
    all-reduces over `group`, each of one number per token (the largest logit, with
    ReduceOp.MAX; the sum of the exponentials; the target's logit, found on the one rank whose
    shard holds it). Backward communicates nothing: softmax minus one-hot, on the local shard."""
    raise NotImplementedError("implement vocab_parallel_cross_entropy (lectures/12-4d-parallelism.md, section 4)")


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


# (Write any helper functions you need here.)
