# Your working copy: replace every `raise NotImplementedError` with your implementation.
# (Generated from the course's reference by `python -m grader sync`.)
"""Tensor-parallel layers, Megatron-style (lecture 07, sections 2 to 4 and 6).

A linear layer Y = X W^T + b (W of shape (out, in)) splits two ways over p ranks:

    column-parallel: W = [W_0; ...; W_{p-1}] by rows (output features). Rank r computes
                     Y_r = X W_r^T + b_r, its out/p columns of Y, from the WHOLE input X.
    row-parallel:    W = [W_0, ..., W_{p-1}] by columns (input features). Rank r computes
                     X_r W_r^T from its in/p columns of X; Y = sum_r X_r W_r^T + b.

A column layer followed by a row layer needs no communication in between (the column layer's
output columns are exactly the row layer's input columns), so an MLP costs one all-reduce in
forward (g, after the row layer) and one in backward (f, before the column layer). Attention
splits the same way by heads: each rank runs a/p query heads (and kv/p key/value heads with GQA).

Every layer here is built from the FULL weights, given on every rank, and keeps only its own
shard, so that the grader can compare it with the same layer on one process. Tensors are laid
out sequence first, (s, b, h), as in Megatron-LM; with sequence_parallel=True a rank's
activations outside the tensor-parallel regions are its chunk of the sequence, (s/p, b, h).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from comm import (
    CollectiveCounter,
    copy_to_tp_region,
    gather_from_sequence_region,
    reduce_from_tp_region,
    scatter_to_sequence_region,
)
from torch import nn


class ColumnParallelLinear(nn.Module):
    """Rank r's rows [r*out/p, (r+1)*out/p) of `weight` (out_features, in_features), kept as the
    nn.Parameter `self.weight` (out_features/p, in_features), and the same slice of `bias`
    (out_features,) as `self.bias` (None when bias is None); copies, so the full weight given is
    not kept. p is the world size of the default group.

    forward(x): x (..., in_features) is the whole input, the same on every rank; it enters through
    copy_to_tp_region (the f operator: its gradient is summed over ranks in backward). With
    sequence_parallel=True, x is instead this rank's chunk of the sequence (dimension 0) and
    enters through gather_from_sequence_region. Returns this rank's out_features/p columns of
    x W^T + b, shape (..., out_features/p); with gather_output=True, every rank's columns
    concatenated in rank order, (..., out_features) (one all-gather; its backward keeps this
    rank's columns of the gradient, without communication).

    Raises ValueError when out_features is not a multiple of p, or weight (or bias) has another
    shape than (out_features, in_features) (or (out_features,)).
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        gather_output: bool = False,
        *,
        weight: torch.Tensor,
        bias: torch.Tensor | None = None,
        sequence_parallel: bool = False,
    ) -> None:
        super().__init__()
        raise NotImplementedError("implement ColumnParallelLinear.__init__ (lectures/07-tensor-parallelism.md, section 2)")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError("implement ColumnParallelLinear.forward (lectures/07-tensor-parallelism.md, section 2)")


class RowParallelLinear(nn.Module):
    """Rank r's columns [r*in/p, (r+1)*in/p) of `weight` (out_features, in_features), kept as the
    nn.Parameter `self.weight` (out_features, in_features/p) (a copy); `bias` (out_features,) is
    kept whole on every rank as `self.bias` (None when bias is None). p is the world size.

    forward(x): with input_is_parallel=True, x (..., in_features/p) holds this rank's columns of
    the input (what a ColumnParallelLinear without gather_output returns); with False, x
    (..., in_features) is the whole input and each rank takes its own columns (in backward the
    gradient's columns of all ranks are gathered, so x.grad is whole). The partial products
    x_r W_r^T are summed over ranks with reduce_from_tp_region (the g operator), then the bias is
    added: the output (..., out_features) is the same on every rank. With sequence_parallel=True
    they are summed with scatter_to_sequence_region instead: the output is this rank's chunk of
    the sequence (dimension 0) of the sum, plus the bias; then this rank's bias.grad covers only
    its chunk of the sequence (the sum over ranks is the bias's gradient).

    Raises ValueError when in_features is not a multiple of p, or weight (or bias) has another
    shape than (out_features, in_features) (or (out_features,)).
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        input_is_parallel: bool = True,
        *,
        weight: torch.Tensor,
        bias: torch.Tensor | None = None,
        sequence_parallel: bool = False,
    ) -> None:
        super().__init__()
        raise NotImplementedError("implement RowParallelLinear.__init__ (lectures/07-tensor-parallelism.md, section 2)")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError("implement RowParallelLinear.forward (lectures/07-tensor-parallelism.md, section 2)")


# (Write any helper functions you need here.)


class ParallelMLP(nn.Module):
    """fc2(gelu(fc1(x))) split over the ranks: `self.fc1` a ColumnParallelLinear(hidden,
    ffn_hidden) and `self.fc2` a RowParallelLinear(ffn_hidden, hidden), built from
    state["fc1.weight"], state["fc1.bias"], state["fc2.weight"], state["fc2.bias"] (the full
    weights of nn.Linear(hidden, ffn_hidden) and nn.Linear(ffn_hidden, hidden)); gelu is the exact
    (erf) one. One all-reduce in forward (after fc2) and one in backward (before fc1), nothing
    between the two layers. sequence_parallel as in the two layers: x and the output are then this
    rank's chunk of the sequence (an all-gather before fc1, a reduce-scatter after fc2).
    Raises ValueError when ffn_hidden is not a multiple of the world size.
    """

    def __init__(
        self, hidden: int, ffn_hidden: int, state: dict[str, torch.Tensor], sequence_parallel: bool = False
    ) -> None:
        super().__init__()
        raise NotImplementedError("implement ParallelMLP.__init__ (lectures/07-tensor-parallelism.md, section 2)")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError("implement ParallelMLP.forward (lectures/07-tensor-parallelism.md, section 2)")


class ParallelSelfAttention(nn.Module):
    """Causal self-attention with `heads` query heads and `kv_heads` key/value heads (GQA:
    query head i reads key/value head i // (heads / kv_heads); kv_heads == heads is MHA), head
    size d = hidden / heads, scores scaled by 1/sqrt(d), on x of shape (s, b, hidden).

    Built from the full weights of nn.Linear layers: state["wq.weight"] (heads*d, hidden),
    state["wk.weight"] and state["wv.weight"] (kv_heads*d, hidden), state["proj.weight"]
    (hidden, heads*d), and their biases "wq.bias", "wk.bias", "wv.bias", "proj.bias". Split by
    heads over the p ranks: rank r runs query heads [r*heads/p, (r+1)*heads/p) and key/value
    heads [r*kv_heads/p, (r+1)*kv_heads/p), whose groups match.

    `self.qkv` is ONE ColumnParallelLinear (one f operator, so one all-reduce in backward) over
    the fused weight whose rank-r block of rows is [rank r's rows of wq; of wk; of wv] (the fused
    bias likewise), and `self.proj` a RowParallelLinear(heads*d, hidden) (rank r's columns are
    its heads' outputs). sequence_parallel as in those layers.

    Raises ValueError when hidden is not a multiple of heads, heads of kv_heads, or heads or
    kv_heads of the world size p.
    """

    def __init__(
        self,
        hidden: int,
        heads: int,
        kv_heads: int,
        state: dict[str, torch.Tensor],
        sequence_parallel: bool = False,
    ) -> None:
        super().__init__()
        raise NotImplementedError("implement ParallelSelfAttention.__init__ (lectures/07-tensor-parallelism.md, section 3)")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError("implement ParallelSelfAttention.forward (lectures/07-tensor-parallelism.md, section 3)")


class ParallelBlock(nn.Module):
    """A pre-norm transformer block split over the ranks of the default group:

        x = x + attention(ln1(x));   x = x + mlp(ln2(x))

    `self.ln1`, `self.ln2`: nn.LayerNorm(hidden) (eps 1e-5), whole on every rank, loaded from
    state["ln1.weight"], ... ; `self.attention`: ParallelSelfAttention(hidden, heads, kv_heads)
    from the state's entries under "attention." ("attention.wq.weight", ...); `self.mlp`:
    ParallelMLP(hidden, ffn_hidden) from those under "mlp.". Call ln1 and ln2 as modules, on the
    tokens this rank holds: the grader counts what they save for backward.

    forward(x): x of shape (s, b, hidden). Tensor parallelism (sequence_parallel=False): x and
    the output are whole on every rank; per forward, two all-reduces of s*b*hidden elements
    (one after attention, one after the MLP) and two in backward. With sequence_parallel=True x
    is this rank's chunk of the sequence, (s/p, b, hidden), and so is the output; the LayerNorms
    and residual additions run on s/p positions; the all-reduces become two all-gathers and two
    reduce-scatters of s*b*hidden elements in forward (and two of each in backward). The
    gradients of the parameters kept whole on every rank (ln1, ln2, attention.proj.bias,
    mlp.fc2.bias) then cover this rank's positions only: their sum over ranks is the gradient.
    Raises ValueError (from the layers) for sizes that do not split.
    """

    def __init__(
        self,
        hidden: int,
        heads: int,
        kv_heads: int,
        ffn_hidden: int,
        state: dict[str, torch.Tensor],
        sequence_parallel: bool = False,
    ) -> None:
        super().__init__()
        raise NotImplementedError("implement ParallelBlock.__init__ (lectures/07-tensor-parallelism.md, section 4)")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError("implement ParallelBlock.forward (lectures/07-tensor-parallelism.md, section 4)")


def linear_step(
    kind: str,
    in_features: int,
    out_features: int,
    flag: bool,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    x: torch.Tensor,
    grad_output: torch.Tensor,
    sequence_parallel: bool = False,
) -> dict[str, object]:
    """Given (the grader calls it on every rank): kind "column" builds ColumnParallelLinear(
    in_features, out_features, gather_output=flag, ...), "row" RowParallelLinear(in_features,
    out_features, input_is_parallel=flag, ...), from the full weight and bias; out = layer(x) on
    this rank's x, then out.backward(grad_output). Returns "output", "grad_input" (x.grad),
    "grad_weight", "grad_bias" (None without a bias), "weight_storage_bytes" (the bytes of the
    storage behind layer.weight) and the collectives counted in "forward" and in "backward"."""
    layer_class = ColumnParallelLinear if kind == "column" else RowParallelLinear
    layer = layer_class(in_features, out_features, flag, weight=weight, bias=bias, sequence_parallel=sequence_parallel)
    x = x.clone().requires_grad_(True)
    with CollectiveCounter() as forward:
        out = layer(x)
    with CollectiveCounter() as backward:
        out.backward(grad_output)
    return {
        "output": out.detach(),
        "grad_input": x.grad,
        "grad_weight": layer.weight.grad,
        "grad_bias": layer.bias.grad if layer.bias is not None else None,
        "weight_storage_bytes": layer.weight.untyped_storage().nbytes(),
        "forward": forward.calls,
        "backward": backward.calls,
    }


class SavedBytes:
    """Given: the bytes autograd saves for backward while it is on, by storage: each distinct
    storage counted once, the parameters of `exclude` not at all."""

    def __init__(self, exclude: nn.Module) -> None:
        self.excluded = {p.untyped_storage().data_ptr() for p in exclude.parameters()}
        self.storages: dict[int, int] = {}
        self.hooks = torch.autograd.graph.saved_tensors_hooks(self.pack, lambda saved: saved)

    def pack(self, tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in self.excluded:
            self.storages[storage.data_ptr()] = storage.nbytes()
        return tensor

    @property
    def total(self) -> int:
        return sum(self.storages.values())


def block_step(
    hidden: int,
    heads: int,
    kv_heads: int,
    ffn_hidden: int,
    state: dict[str, torch.Tensor],
    x: torch.Tensor,
    grad_output: torch.Tensor,
    sequence_parallel: bool,
) -> dict[str, object]:
    """Given (the grader calls it on every rank): ParallelBlock(hidden, heads, kv_heads,
    ffn_hidden, state, sequence_parallel), out = block(x) on this rank's x, then
    out.backward(grad_output). Returns "output", "grad_input" (x.grad), "grads" (every
    parameter's gradient by its name in block.named_parameters()), the collectives counted in
    "forward" and in "backward" (CollectiveCounter.calls), and "layernorm_saved_bytes": what ln1
    and ln2 saved for backward (SavedBytes, their own parameters excluded)."""
    block = ParallelBlock(hidden, heads, kv_heads, ffn_hidden, state, sequence_parallel)
    x = x.clone().requires_grad_(True)
    saved = SavedBytes(exclude=block)
    hooks = [
        handle
        for norm in (block.ln1, block.ln2)
        for handle in (
            norm.register_forward_pre_hook(lambda *_: saved.hooks.__enter__()),
            norm.register_forward_hook(lambda *_: saved.hooks.__exit__(None, None, None)),
        )
    ]
    with CollectiveCounter() as forward:
        out = block(x)
    for handle in hooks:
        handle.remove()
    with CollectiveCounter() as backward:
        out.backward(grad_output)
    return {
        "output": out.detach(),
        "grad_input": x.grad,
        "grads": {name: p.grad for name, p in block.named_parameters()},
        "forward": forward.calls,
        "backward": backward.calls,
        "layernorm_saved_bytes": saved.total,
    }
