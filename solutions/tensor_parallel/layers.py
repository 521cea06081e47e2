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
shard, so that the grader can compare it with the same layer on one process. Every layer splits
over the ranks of its `group`, a torch.distributed ProcessGroup (None: the default group, the
whole world): p is the size of `group`, "rank r" a rank's index in it (dist.get_rank(group)),
and every collective runs within it. Tensors are laid out sequence first, (s, b, h), as in
Megatron-LM; with sequence_parallel=True a rank's activations outside the tensor-parallel regions
are its chunk of the sequence, (s/p, b, h).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from comm import (
    CollectiveCounter,
    copy_to_tp_region,
    gather_from_sequence_parallel_region,
    reduce_from_tp_region,
    reduce_scatter_to_sequence_parallel_region,
)
from torch import nn


class ColumnParallelLinear(nn.Module):
    """Rank r's rows [r*out/p, (r+1)*out/p) of `weight` (out_features, in_features), kept as the
    nn.Parameter `self.weight` (out_features/p, in_features), and the same slice of `bias`
    (out_features,) as `self.bias` (None when bias is None); copies, so the full weight given is
    not kept. p is the size of `group` (None: the default group), r this rank's index in it.

    forward(x): x (..., in_features) is the whole input, the same on every rank; it enters through
    copy_to_tp_region(x, group) (the f operator: its gradient is summed over ranks in backward).
    With sequence_parallel=True, x is instead this rank's chunk of the sequence (dimension 0):
    the layer all-gathers the chunks along dimension 0 for its matmul, as
    gather_from_sequence_parallel_region does, but keeps only this rank's chunk for backward
    (an autograd Function, as Megatron-Core's LinearWithGradAccumulationAndAsyncCommunication
    with sequence_parallel): backward all-gathers the chunks again to compute the weight's
    gradient and reduce-scatters the input's gradient, x.grad being this rank's chunk of the
    sum; one all-gather in forward, one all-gather and one reduce-scatter in backward, each of
    the whole gathered input. Returns this rank's out_features/p columns of x W^T + b, shape
    (..., out_features/p); with gather_output=True, every rank's columns concatenated in rank
    order, (..., out_features) (one all-gather; its backward keeps this rank's columns of the
    gradient, without communication).

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
        group: dist.ProcessGroup | None = None,
    ) -> None:
        super().__init__()
        ### BEGIN SOLUTION
        world_size, rank = dist.get_world_size(group), dist.get_rank(group)
        _check_shapes("ColumnParallelLinear", in_features, out_features, weight, bias)
        if out_features % world_size:
            raise ValueError(
                f"ColumnParallelLinear: {out_features} output features do not split over {world_size} ranks"
            )
        rows = slice(rank * out_features // world_size, (rank + 1) * out_features // world_size)
        self.weight = nn.Parameter(weight.detach()[rows].clone())
        self.bias = nn.Parameter(bias.detach()[rows].clone()) if bias is not None else None
        self.gather_output = gather_output
        self.sequence_parallel = sequence_parallel
        self.group = group
        ### END SOLUTION

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ### BEGIN SOLUTION
        if self.sequence_parallel:
            y = _SequenceParallelLinear.apply(x, self.weight, self.bias, self.group)
        else:
            y = F.linear(copy_to_tp_region(x, self.group), self.weight, self.bias)
        return _GatherLastDim.apply(y, self.group) if self.gather_output else y
        ### END SOLUTION


class RowParallelLinear(nn.Module):
    """Rank r's columns [r*in/p, (r+1)*in/p) of `weight` (out_features, in_features), kept as the
    nn.Parameter `self.weight` (out_features, in_features/p) (a copy); `bias` (out_features,) is
    kept whole on every rank as `self.bias` (None when bias is None). p is the size of `group`
    (None: the default group), r this rank's index in it.

    forward(x): with input_is_parallel=True, x (..., in_features/p) holds this rank's columns of
    the input (what a ColumnParallelLinear without gather_output returns); with False, x
    (..., in_features) is the whole input and each rank takes its own columns (in backward the
    gradient's columns of all ranks are gathered, so x.grad is whole). The partial products
    x_r W_r^T are summed over ranks with reduce_from_tp_region (the g operator), then the bias is
    added: the output (..., out_features) is the same on every rank. With sequence_parallel=True
    they are summed with reduce_scatter_to_sequence_parallel_region instead: the output is this
    rank's chunk of the sequence (dimension 0) of the sum, plus the bias; then this rank's
    bias.grad covers only its chunk of the sequence (the sum over ranks is the bias's gradient).

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
        group: dist.ProcessGroup | None = None,
    ) -> None:
        super().__init__()
        ### BEGIN SOLUTION
        world_size, rank = dist.get_world_size(group), dist.get_rank(group)
        _check_shapes("RowParallelLinear", in_features, out_features, weight, bias)
        if in_features % world_size:
            raise ValueError(f"RowParallelLinear: {in_features} input features do not split over {world_size} ranks")
        columns = slice(rank * in_features // world_size, (rank + 1) * in_features // world_size)
        self.weight = nn.Parameter(weight.detach()[:, columns].clone())
        self.bias = nn.Parameter(bias.detach().clone()) if bias is not None else None
        self.input_is_parallel = input_is_parallel
        self.sequence_parallel = sequence_parallel
        self.group = group
        ### END SOLUTION

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ### BEGIN SOLUTION
        if not self.input_is_parallel:
            x = _SplitLastDim.apply(x, self.group)
        partial = F.linear(x, self.weight)
        if self.sequence_parallel:
            y = reduce_scatter_to_sequence_parallel_region(partial, self.group)
        else:
            y = reduce_from_tp_region(partial, self.group)
        return y + self.bias if self.bias is not None else y
        ### END SOLUTION


### BEGIN SOLUTION
def _check_shapes(
    layer: str, in_features: int, out_features: int, weight: torch.Tensor, bias: torch.Tensor | None
) -> None:
    if tuple(weight.shape) != (out_features, in_features):
        raise ValueError(f"{layer}: weight of shape {tuple(weight.shape)}, expected ({out_features}, {in_features})")
    if bias is not None and tuple(bias.shape) != (out_features,):
        raise ValueError(f"{layer}: bias of shape {tuple(bias.shape)}, expected ({out_features},)")


class _SequenceParallelLinear(torch.autograd.Function):
    """x W^T + b on the sequence chunks of every member of `group` gathered along dimension 0,
    keeping only this rank's chunk for backward (Megatron-Core's
    LinearWithGradAccumulationAndAsyncCommunication with sequence_parallel): the gathered input
    is p times larger and is needed again only for the weight's gradient, so it is all-gathered
    a second time in backward rather than kept."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, group) -> torch.Tensor:
        ctx.save_for_backward(x, weight)
        ctx.group, ctx.has_bias = group, bias is not None
        return F.linear(gather_from_sequence_parallel_region(x, group), weight, bias)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        x, weight = ctx.saved_tensors
        whole = gather_from_sequence_parallel_region(x, ctx.group).flatten(0, -2)
        grad_input = reduce_scatter_to_sequence_parallel_region(grad.matmul(weight), ctx.group)
        rows = grad.flatten(0, -2)
        return grad_input, rows.T @ whole, rows.sum(0) if ctx.has_bias else None, None


class _GatherLastDim(torch.autograd.Function):
    """Forward: every member's columns concatenated along the last dimension; backward: this
    rank's columns of the gradient (the gradient is the same on every member)."""

    @staticmethod
    def forward(ctx, y: torch.Tensor, group) -> torch.Tensor:
        ctx.group = group
        return _gather_columns(y, group)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        columns = grad.chunk(dist.get_world_size(ctx.group), dim=-1)[dist.get_rank(ctx.group)]
        return columns.contiguous(), None


class _SplitLastDim(torch.autograd.Function):
    """Forward: this rank's columns; backward: the gradient's columns of all members gathered."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, group) -> torch.Tensor:
        ctx.group = group
        return x.chunk(dist.get_world_size(group), dim=-1)[dist.get_rank(group)].contiguous()

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return _gather_columns(grad, ctx.group), None


def _gather_columns(y: torch.Tensor, group) -> torch.Tensor:
    """Every member's y concatenated along the last dimension, in group-rank order."""
    chunk = y.movedim(-1, 0).contiguous()  # the columns first, so that ranks stack along dim 0
    gathered = chunk.new_empty((dist.get_world_size(group) * chunk.shape[0], *chunk.shape[1:]))
    dist.all_gather_single(gathered, chunk, group=group)
    return gathered.movedim(0, -1).contiguous()


### END SOLUTION


class ParallelMLP(nn.Module):
    """fc2(gelu(fc1(x))) split over the ranks: `self.fc1` a ColumnParallelLinear(hidden,
    ffn_hidden) and `self.fc2` a RowParallelLinear(ffn_hidden, hidden), built from
    state["fc1.weight"], state["fc1.bias"], state["fc2.weight"], state["fc2.bias"] (the full
    weights of nn.Linear(hidden, ffn_hidden) and nn.Linear(ffn_hidden, hidden)); gelu is the exact
    (erf) one. One all-reduce in forward (after fc2) and one in backward (before fc1), nothing
    between the two layers. sequence_parallel as in the two layers: x and the output are then this
    rank's chunk of the sequence (an all-gather in fc1 and a reduce-scatter after fc2 in forward;
    in backward the all-gather of fc2's gradient, and fc1's all-gather of its input and
    reduce-scatter of its input's gradient). Both layers split over `group` (None: the default
    group). Raises ValueError when ffn_hidden is not a multiple of the size of `group`.
    """

    def __init__(
        self,
        hidden: int,
        ffn_hidden: int,
        state: dict[str, torch.Tensor],
        sequence_parallel: bool = False,
        *,
        group: dist.ProcessGroup | None = None,
    ) -> None:
        super().__init__()
        ### BEGIN SOLUTION
        self.fc1 = ColumnParallelLinear(
            hidden,
            ffn_hidden,
            weight=state["fc1.weight"],
            bias=state["fc1.bias"],
            sequence_parallel=sequence_parallel,
            group=group,
        )
        self.fc2 = RowParallelLinear(
            ffn_hidden,
            hidden,
            weight=state["fc2.weight"],
            bias=state["fc2.bias"],
            sequence_parallel=sequence_parallel,
            group=group,
        )
        ### END SOLUTION

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ### BEGIN SOLUTION
        return self.fc2(F.gelu(self.fc1(x)))
        ### END SOLUTION


class ParallelSelfAttention(nn.Module):
    """Causal self-attention with `heads` query heads and `kv_heads` key/value heads (GQA:
    query head i reads key/value head i // (heads / kv_heads); kv_heads == heads is MHA), head
    size d = hidden / heads, scores scaled by 1/sqrt(d), on x of shape (s, b, hidden).

    Built from the full weights of nn.Linear layers: state["wq.weight"] (heads*d, hidden),
    state["wk.weight"] and state["wv.weight"] (kv_heads*d, hidden), state["proj.weight"]
    (hidden, heads*d), and their biases "wq.bias", "wk.bias", "wv.bias", "proj.bias". Split by
    heads over the p ranks of `group` (None: the default group): rank r runs query heads
    [r*heads/p, (r+1)*heads/p) and key/value heads [r*kv_heads/p, (r+1)*kv_heads/p), whose groups
    match.

    `self.qkv` is ONE ColumnParallelLinear (one f operator, so one all-reduce in backward) over
    the fused weight whose rank-r block of rows is [rank r's rows of wq; of wk; of wv] (the fused
    bias likewise), and `self.proj` a RowParallelLinear(heads*d, hidden) (rank r's columns are
    its heads' outputs). sequence_parallel as in those layers. The attention of this rank's heads
    is one F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True) on q, k and v
    of shape (b, heads, s, d) taken as views of self.qkv's output (no copies: SDPA saves them
    for backward, and a copy would be saved beside the output it came from).

    A rank may hold several key/value heads (heads 8, kv_heads 4 on 2 ranks: query heads 4r..4r+3
    read key/value heads 2r and 2r+1, two query heads each). Fewer key/value heads than ranks
    (MQA's one on 2 ranks) is refused, as Megatron-Core refuses it (its
    divide(num_query_groups, tensor-parallel size) asserts); vLLM would instead replicate each
    key/value head on p / kv_heads ranks.

    Raises ValueError when hidden is not a multiple of heads, heads of kv_heads, or heads or
    kv_heads of the size p of `group`.
    """

    def __init__(
        self,
        hidden: int,
        heads: int,
        kv_heads: int,
        state: dict[str, torch.Tensor],
        sequence_parallel: bool = False,
        *,
        group: dist.ProcessGroup | None = None,
    ) -> None:
        super().__init__()
        ### BEGIN SOLUTION
        world_size = dist.get_world_size(group)
        if hidden % heads or heads % kv_heads:
            raise ValueError(f"{hidden} hidden features, {heads} heads and {kv_heads} kv heads do not divide")
        if heads % world_size or kv_heads % world_size:
            raise ValueError(
                f"{heads} query heads and {kv_heads} key/value heads must both split over {world_size} ranks"
            )
        self.head_dim = hidden // heads
        self.local_heads, self.local_kv_heads = heads // world_size, kv_heads // world_size

        def fused(kind: str) -> torch.Tensor:
            """[wq_r; wk_r; wv_r] for r = 0..p-1: ColumnParallelLinear's contiguous shard r."""
            parts = [state[f"{name}.{kind}"].chunk(world_size) for name in ("wq", "wk", "wv")]
            return torch.cat([block for rank in zip(*parts) for block in rank])

        width = (heads + 2 * kv_heads) * self.head_dim
        self.qkv = ColumnParallelLinear(
            hidden,
            width,
            weight=fused("weight"),
            bias=fused("bias"),
            sequence_parallel=sequence_parallel,
            group=group,
        )
        self.proj = RowParallelLinear(
            heads * self.head_dim,
            hidden,
            weight=state["proj.weight"],
            bias=state["proj.bias"],
            sequence_parallel=sequence_parallel,
            group=group,
        )
        ### END SOLUTION

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ### BEGIN SOLUTION
        qkv = self.qkv(x)  # (s, b, (local heads + 2 local kv heads) * d)
        s, b, _ = qkv.shape
        d, heads, kv = self.head_dim, self.local_heads, self.local_kv_heads
        q, k, v = qkv.split([heads * d, kv * d, kv * d], dim=-1)
        q, k, v = (t.unflatten(-1, (-1, d)).permute(1, 2, 0, 3) for t in (q, k, v))  # (b, heads, s, d) views
        # enable_gqa: each kv head serves its group of query heads without a repeated copy of k, v
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        return self.proj(y.permute(2, 0, 1, 3).reshape(s, b, heads * d))
        ### END SOLUTION


class ParallelBlock(nn.Module):
    """A pre-norm transformer block split over the p ranks of `group` (None: the default group):

        x = x + attention(ln1(x));   x = x + mlp(ln2(x))

    `self.ln1`, `self.ln2`: nn.LayerNorm(hidden) (eps 1e-5), whole on every rank, loaded from
    state["ln1.weight"], ... ; `self.attention`: ParallelSelfAttention(hidden, heads, kv_heads)
    from the state's entries under "attention." ("attention.wq.weight", ...); `self.mlp`:
    ParallelMLP(hidden, ffn_hidden) from those under "mlp."; all of them on `group`. Call ln1 and
    ln2 as modules, on the tokens this rank holds: the grader counts what they save for backward.

    forward(x): x of shape (s, b, hidden). Tensor parallelism (sequence_parallel=False): x and
    the output are whole on every rank; per forward, two all-reduces of s*b*hidden elements
    (one after attention, one after the MLP) and two in backward. With sequence_parallel=True x
    is this rank's chunk of the sequence, (s/p, b, hidden), and so is the output; the LayerNorms
    and residual additions run on s/p positions; the all-reduces become two all-gathers and two
    reduce-scatters of s*b*hidden elements in forward, and in backward four all-gathers (the
    row layers' gradients, and the column layers' inputs gathered again) and two reduce-scatters
    (the column layers' input gradients), each of s*b*hidden elements. The gradients of the
    parameters kept whole on every rank (ln1, ln2, attention.proj.bias, mlp.fc2.bias) then cover
    this rank's positions only: their sum over ranks is the gradient.

    What one forward keeps for backward on each rank (every tensor autograd saves, by storage,
    parameters excluded), in elements of x's dtype, with d = hidden / heads, f = ffn_hidden:

        (4*s*b*hidden + 4*s*b) / q  +  (s*b*(heads + 2*kv_heads)*d + s*b*hidden + heads*s*b + 2*s*b*f) / p

    q = p with sequence parallelism, 1 without. Outside the regions: the inputs of ln1 and ln2,
    their means and reciprocal deviations, and the inputs of self.qkv and mlp.fc1 (this rank's
    chunk only, under sequence parallelism). Inside, this rank's heads and columns: self.qkv's
    output (q, k and v are views of it), the attention output (proj's input is a view of it),
    SDPA's logsumexp (heads*s*b; SDPA's CPU kernel saves it with its output) and the inputs of
    the GeLU and of mlp.fc2. No more than that.
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
        *,
        group: dist.ProcessGroup | None = None,
    ) -> None:
        super().__init__()
        ### BEGIN SOLUTION
        dtype = state["ln1.weight"].dtype
        self.ln1, self.ln2 = nn.LayerNorm(hidden, dtype=dtype), nn.LayerNorm(hidden, dtype=dtype)
        with torch.no_grad():
            for name, norm in (("ln1", self.ln1), ("ln2", self.ln2)):
                norm.weight.copy_(state[f"{name}.weight"])
                norm.bias.copy_(state[f"{name}.bias"])

        def under(prefix: str) -> dict[str, torch.Tensor]:
            return {k.removeprefix(prefix): v for k, v in state.items() if k.startswith(prefix)}

        self.attention = ParallelSelfAttention(
            hidden, heads, kv_heads, under("attention."), sequence_parallel, group=group
        )
        self.mlp = ParallelMLP(hidden, ffn_hidden, under("mlp."), sequence_parallel, group=group)
        ### END SOLUTION

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ### BEGIN SOLUTION
        x = x + self.attention(self.ln1(x))
        return x + self.mlp(self.ln2(x))
        ### END SOLUTION


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
    group: dist.ProcessGroup | None = None,
) -> dict[str, object]:
    """Given (the grader calls it on every rank of `group`): kind "column" builds
    ColumnParallelLinear(in_features, out_features, gather_output=flag, ...), "row"
    RowParallelLinear(in_features, out_features, input_is_parallel=flag, ...), from the full
    weight and bias, on `group`; out = layer(x) on this rank's x, then out.backward(grad_output).
    Returns "output", "grad_input" (x.grad), "grad_weight", "grad_bias" (None without a bias),
    "weight_storage_bytes" (the bytes of the storage behind layer.weight), "saved_bytes" (what the
    forward saved for backward, SavedBytes, the layer's parameters excluded) and the collectives
    counted in "forward" and in "backward"."""
    layer_class = ColumnParallelLinear if kind == "column" else RowParallelLinear
    layer = layer_class(
        in_features, out_features, flag, weight=weight, bias=bias, sequence_parallel=sequence_parallel, group=group
    )
    x = x.clone().requires_grad_(True)
    saved = SavedBytes(exclude=layer)
    with CollectiveCounter() as forward, saved.hooks:
        out = layer(x)
    with CollectiveCounter() as backward:
        out.backward(grad_output)
    return {
        "output": out.detach(),
        "grad_input": x.grad,
        "grad_weight": layer.weight.grad,
        "grad_bias": layer.bias.grad if layer.bias is not None else None,
        "weight_storage_bytes": layer.weight.untyped_storage().nbytes(),
        "saved_bytes": saved.total,
        "forward": forward.calls,
        "backward": backward.calls,
    }


class SavedBytes:
    """Given: the bytes autograd saves for backward while `self.hooks` is on (`with
    saved.hooks:`), by storage: each distinct storage counted once, the parameters of `exclude`
    not at all. `total` counts them all; `marked_total` those saved while `self.marking` was
    True (set around one part of the forward)."""

    def __init__(self, exclude: nn.Module) -> None:
        self.excluded = {p.untyped_storage().data_ptr() for p in exclude.parameters()}
        self.storages: dict[int, int] = {}
        self.marked: dict[int, int] = {}
        self.marking = False
        self.hooks = torch.autograd.graph.saved_tensors_hooks(self.pack, lambda saved: saved)

    def pack(self, tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in self.excluded:
            self.storages[storage.data_ptr()] = storage.nbytes()
            if self.marking:
                self.marked[storage.data_ptr()] = storage.nbytes()
        return tensor

    @property
    def total(self) -> int:
        return sum(self.storages.values())

    @property
    def marked_total(self) -> int:
        return sum(self.marked.values())


def block_step(
    hidden: int,
    heads: int,
    kv_heads: int,
    ffn_hidden: int,
    state: dict[str, torch.Tensor],
    x: torch.Tensor,
    grad_output: torch.Tensor,
    sequence_parallel: bool,
    group: dist.ProcessGroup | None = None,
) -> dict[str, object]:
    """Given (the grader calls it on every rank of `group`): ParallelBlock(hidden, heads,
    kv_heads, ffn_hidden, state, sequence_parallel, group=group), out = block(x) on this rank's
    x, then out.backward(grad_output). Returns "output", "grad_input" (x.grad), "grads" (every
    parameter's gradient by its name in block.named_parameters()), the collectives counted in
    "forward" and in "backward" (CollectiveCounter.calls), "saved_bytes": what the whole forward
    saved for backward (SavedBytes, the block's parameters excluded), and
    "layernorm_saved_bytes": the part of it ln1 and ln2 saved."""
    block = ParallelBlock(hidden, heads, kv_heads, ffn_hidden, state, sequence_parallel, group=group)
    x = x.clone().requires_grad_(True)
    saved = SavedBytes(exclude=block)
    hooks = [
        handle
        for norm in (block.ln1, block.ln2)
        for handle in (
            norm.register_forward_pre_hook(lambda *_: setattr(saved, "marking", True)),
            norm.register_forward_hook(lambda *_: setattr(saved, "marking", False)),
        )
    ]
    with CollectiveCounter() as forward, saved.hooks:
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
        "saved_bytes": saved.total,
        "layernorm_saved_bytes": saved.marked_total,
    }
