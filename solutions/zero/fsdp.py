"""ZeRO stage 3, FSDP-style: the parameters themselves are sharded (lecture 02, section 5).

Each layer's parameters are flattened into one vector, zero-padded to a multiple of p and cut
into p equal chunks; rank r keeps only chunk r. A layer's full parameters exist only while it
runs:

    forward:   all-gather the layer's chunks -> run the layer -> free the gathered vector
    backward:  all-gather again -> backpropagate through the layer -> free it again
               -> reduce-scatter the full gradient: rank r keeps the (averaged) gradient of chunk r

So a rank holds Psi/p parameters plus one layer at a time, and the optimizer, built over the
shards, keeps Psi/p of gradients and state too. Adam and SGD act element by element, so
stepping each shard on its own is the same step as on the whole model.

Mixed precision (lecture 02, section 5, "Mixed precision"): the shards, their gradients and the
optimizer state stay in fp32 (the master copy); each layer is gathered and run in a 16-bit
compute dtype, and its gradient is cast back to fp32 before it is summed over ranks.
"""

from __future__ import annotations

import gc
from collections.abc import Iterable

import torch
import torch.distributed as dist
import torch.nn.functional as F
from ddp import make_model
from torch import nn
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves


def fully_shard(
    model: nn.Module, compute_dtype: torch.dtype | None = None, group: dist.ProcessGroup | None = None
) -> nn.Module:
    """Shard every direct child of `model` (a "layer") over the ranks of `group` (None: the
    default group, the whole world), in place, and return `model`. `group` is the
    data-parallel group, the ranks that hold the same slice of the model when FSDP is combined
    with tensor or pipeline parallelism: p is its size, "rank r" its group rank
    (dist.get_rank(group)), and both collectives take group=group. All of the model's
    parameters live in its children and require grad; no parameter is shared between layers.

    Layout (the grader reads it): the layer's parameters in layer.named_parameters() order,
    flattened and concatenated, zero-padded at the end to a multiple of p and
    cut into p equal chunks; rank r keeps chunk r as the layer's only parameter, an
    nn.Parameter registered under the name "flat_shard". The original parameters are removed
    from the layer and their memory released, so model.parameters() yields only the shards (an
    optimizer built over them steps 1/p of the model).

    Calling the layer must work as before:
    - forward: dist.all_gather_into_tensor the shards into the full flat vector, give the
      layer's modules their parameters back as views of it, run the layer, then drop every
      reference to the gathered vector (including the tensors autograd saves for backward:
      see torch.autograd.graph.saved_tensors_hooks);
    - backward: all-gather the layer's parameters again when autograd first needs them,
      backpropagate, free them, and dist.reduce_scatter_tensor the full flat gradient so that
      flat_shard.grad is the average over ranks of the gradient of this rank's chunk.

    Mixed precision, compute_dtype (e.g. torch.bfloat16 or torch.float16; None: the parameters'
    own dtype everywhere, nothing is cast):
    - the shards, flat_shard.grad and so the optimizer state keep the dtype the parameters came
      in (fp32: the master copy the optimizer steps);
    - forward and backward run in compute_dtype: cast this rank's shard to compute_dtype BEFORE
      the all-gather, so the gathered layer (and what goes over the wire) is compute_dtype, half
      the bytes of fp32; cast the layer's floating-point tensor inputs to compute_dtype; the
      layer's outputs are whatever it produces;
    - gradients are reduced in fp32: cast the full-layer gradient (compute_dtype) to the shard's
      dtype, then reduce-scatter it, so flat_shard.grad is the fp32 average over ranks.

    The grader counts every storage alive between layers (see train_fsdp): at most this rank's
    shards plus one layer, and while a layer runs, at most the shards plus that layer once in
    compute_dtype (and this rank's chunk cast for the all-gather): a layer gathered in fp32 and
    cast afterwards exceeds it. gloo's thread may hold a collective's buffers for a moment after
    a synchronous call returns; tensor.untyped_storage().resize_(0) releases a buffer at once.
    """
    ### BEGIN SOLUTION
    for layer in model.children():
        if list(layer.parameters()):
            _ShardedLayer(layer, compute_dtype, group)
    return model
    ### END SOLUTION


### BEGIN SOLUTION
class _ShardedLayer:
    """One layer's shard, and the gather/free of its full parameters around forward and backward."""

    def __init__(self, layer: nn.Module, compute_dtype: torch.dtype | None, group: dist.ProcessGroup | None) -> None:
        self.group, self.world_size, rank = group, dist.get_world_size(group), dist.get_rank(group)
        named = list(layer.named_parameters())
        self.names = [name for name, _ in named]
        self.shapes = [p.shape for _, p in named]
        self.numels = [p.numel() for _, p in named]
        flat = torch.cat([p.detach().reshape(-1) for _, p in named])
        padded = -(-flat.numel() // self.world_size) * self.world_size  # round up to a multiple of p
        chunk = F.pad(flat, (0, padded - flat.numel())).chunk(self.world_size)[rank]
        for name in self.names:
            owner, _, attribute = name.rpartition(".")
            del layer.get_submodule(owner)._parameters[attribute]
        layer.register_parameter("flat_shard", nn.Parameter(chunk.clone()))
        self.compute_dtype = compute_dtype  # None: the shard's own dtype, nothing cast
        self.layer, self.forward = layer, layer.forward
        self.full: torch.Tensor | None = None  # the gathered flat vector, while forward runs
        self.regathered: torch.Tensor | None = None  # the same, while backward needs it
        layer.forward = self.sharded_forward

    def gather(self) -> torch.Tensor:
        """The layer's full flat parameters, in compute_dtype: the shard is cast BEFORE the
        all-gather, so the wire and the gathered vector carry 2 bytes per element, not 4."""
        shard = self.layer.flat_shard.detach()
        low = shard.to(self.compute_dtype or shard.dtype)  # the shard itself when nothing to cast
        full = low.new_empty(low.numel() * self.world_size)
        dist.all_gather_into_tensor(full, low, group=self.group)
        if low.dtype != shard.dtype:
            _free(low)  # our own cast copy, never the shard
        return full

    def cast(self, value):
        """A floating-point tensor input in compute_dtype (a differentiable cast: its gradient
        flows back in the input's own dtype); anything else unchanged."""
        if self.compute_dtype is not None and isinstance(value, torch.Tensor) and value.is_floating_point():
            return value.to(self.compute_dtype)
        return value

    def set_parameters(self, full: torch.Tensor | None) -> None:
        """Views of `full` as the layer's parameters (None: remove them)."""
        views = full[: sum(self.numels)].split(self.numels) if full is not None else [None] * len(self.names)
        for name, shape, view in zip(self.names, self.shapes, views):
            owner, _, attribute = name.rpartition(".")
            setattr(self.layer.get_submodule(owner), attribute, view.view(shape) if view is not None else None)

    def sharded_forward(self, *args, **kwargs):
        args, kwargs = [self.cast(a) for a in args], {k: self.cast(v) for k, v in kwargs.items()}
        self.full = _GatherLayer.apply(self.layer.flat_shard, self)
        self.set_parameters(self.full)
        with torch.autograd.graph.saved_tensors_hooks(self.pack, self.unpack):
            out = self.forward(*args, **kwargs)
        self.set_parameters(None)
        _free(self.full)
        self.full = None
        return out

    def pack(self, tensor: torch.Tensor):
        """A view of the gathered parameters is saved as its geometry only: no reference kept."""
        if self.full is not None and tensor.untyped_storage().data_ptr() == self.full.untyped_storage().data_ptr():
            return (tensor.size(), tensor.stride(), tensor.storage_offset())
        return tensor

    def unpack(self, packed):
        if isinstance(packed, torch.Tensor):
            return packed
        if self.regathered is None:  # the first use in backward: gather again
            self.regathered = self.gather()
        return self.regathered.as_strided(*packed)


class _GatherLayer(torch.autograd.Function):
    """full = all_gather(cast(shard)); backward: grad_shard = reduce_scatter(fp32(grad_full)) / p.

    The gradient is cast up BEFORE the reduce-scatter: in fp32 the sum of p 16-bit values (8
    significant bits in bf16, 11 in fp16) is exact, where a sum in 16 bits rounds after every
    addition (by up to 2^-9 of the sum in bf16)."""

    @staticmethod
    def forward(ctx, shard: torch.Tensor, layer: _ShardedLayer) -> torch.Tensor:
        ctx.layer, ctx.dtype = layer, shard.dtype
        return layer.gather()

    @staticmethod
    def backward(ctx, grad_full: torch.Tensor):
        _free(ctx.layer.regathered)  # backward through the layer is done: free its parameters
        ctx.layer.regathered = None
        grad_full = grad_full.to(ctx.dtype, copy=True)  # fp32, and a buffer of our own to free below
        grad_shard = grad_full.new_empty(grad_full.numel() // ctx.layer.world_size)
        dist.reduce_scatter_tensor(grad_shard, grad_full, group=ctx.layer.group)
        _free(grad_full)
        return grad_shard.div_(ctx.layer.world_size), None


def _free(tensor: torch.Tensor | None) -> None:
    """Release a buffer's memory now, even while the communication backend's thread still
    holds a reference to it for a moment after a synchronous collective."""
    if tensor is not None:
        tensor.untyped_storage().resize_(0)


### END SOLUTION


class StorageTracker(TorchDispatchMode):
    """Given: remembers (weakly) every storage an operator allocates while the mode is on.

    live_bytes() sums the current size of those still alive: a tensor is counted wherever its
    last reference hides (an attribute, a closure, a list, the tensors autograd saves for
    backward), and a storage shrunk with untyped_storage().resize_(0) counts as freed. While
    `peak` is not None, it is raised to live_bytes() after every operator that allocates.
    """

    def __init__(self, ignore: Iterable[torch.Tensor] = ()) -> None:
        super().__init__()
        self.storages: dict[int, StorageWeakRef] = {}
        self.ignored = {_key(t) for t in ignore}
        self.peak: int | None = None

    def track(self, tensor: torch.Tensor) -> None:
        self.storages.setdefault(_key(tensor), StorageWeakRef(tensor.untyped_storage()))

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        # Only storages the operator allocated: a view or an in-place result aliases an input.
        inputs = {_key(t) for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)}
        allocated = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor) and _key(t) not in inputs]
        for leaf in allocated:
            self.track(leaf)
        if allocated and self.peak is not None:
            self.peak = max(self.peak, self.live_bytes())
        return out

    def live_bytes(self) -> int:
        self.storages = {cdata: ref for cdata, ref in self.storages.items() if not ref.expired()}  # forget the dead
        alive = [ref for cdata, ref in self.storages.items() if cdata not in self.ignored]
        return sum(torch.UntypedStorage._new_with_weak_ptr(ref.cdata).nbytes() for ref in alive)


def _key(tensor: torch.Tensor) -> int:
    """The identity of a tensor's storage (its StorageImpl)."""
    return tensor.untyped_storage()._cdata


def train_fsdp(
    variant: str,
    state: dict[str, torch.Tensor],
    optimizer: str,
    lr: float,
    inputs: torch.Tensor,
    targets: torch.Tensor,
    compute_dtype: torch.dtype | None = None,
    group: dist.ProcessGroup | None = None,
) -> dict[str, object]:
    """Given (the grader calls it on every rank): make_model(variant) loaded from `state` (in the
    inputs' dtype), put through fully_shard(model), with compute_dtype= and group= passed only
    when given (not None), trained one step per batch (this rank's slices) on the mean squared
    error, taken in the targets' dtype (the model's output cast to it), with an optimizer over
    model.parameters(): "sgd" (momentum 0.9) or "adamw" (weight decay 0.01).

    Memory is counted by a StorageTracker that is on while fully_shard, the forwards and the
    backwards run (not the optimizer's own step): every storage any operator allocates there,
    plus the original parameters' storages, while they stay alive. The first step only warms
    up; then the same count is taken on the plain (unsharded) model, in compute_dtype if given,
    on the inputs cast to it: its only counted storages are activations. For every later step:

    - "resident_bytes": at each layer boundary (before each layer, after the last), the
      sharded model's live bytes minus the plain model's at the same boundary (= parameters);
    - "layer_peak_bytes": for each layer, the most live bytes from its boundary to the next
      (while it runs: its gathered parameters are there), minus the plain model's;
    - "after_backward_bytes": live bytes once loss.backward() has returned;
    and "shards": each layer's final flat_shard, by layer name; "grads": each layer's
    flat_shard.grad after the first backward; "returned_the_model": whether fully_shard
    returned the model it was given.
    """
    width, dtype = inputs.shape[-1], inputs.dtype
    model = make_model(variant, width).to(dtype)
    model.load_state_dict(state)
    tracker = StorageTracker()
    for p in model.parameters():
        tracker.track(p)
    # Only what is given is passed: a fully_shard written before mixed precision or groups works too.
    given = {"compute_dtype": compute_dtype, "group": group}
    with tracker:
        returned = fully_shard(model, **{name: value for name, value in given.items() if value is not None})
    if optimizer == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    resident, peaks, after_backward = [], [], []
    for step, (x, y) in enumerate(zip(inputs, targets)):
        opt.zero_grad(set_to_none=True)
        counts, peak = _boundary_counts(model, x, y, tracker)
        if step == 0:
            grads = {name: layer.flat_shard.grad.detach().clone() for name, layer in model.named_children()}
            # The first operators run under a dispatch mode leave some garbage in reference
            # cycles: collect it once, then measure the activations of the plain model.
            gc.collect()
            plain = make_model(variant, width).to(compute_dtype or dtype)
            plain.load_state_dict(state)
            plain_tracker = StorageTracker(ignore=plain.parameters())
            activations, plain_peak = _boundary_counts(plain, x, y, plain_tracker, compute_dtype)
        else:
            resident.append([n - a for n, a in zip(counts, activations)])
            peaks.append([n - a for n, a in zip(peak, plain_peak)])
            after_backward.append(tracker.live_bytes())
        opt.step()
    return {
        "shards": {name: layer.flat_shard.detach().clone() for name, layer in model.named_children()},
        "returned_the_model": returned is model,
        "grads": grads,
        "resident_bytes": resident,
        "layer_peak_bytes": peaks,
        "after_backward_bytes": after_backward,
    }


def _boundary_counts(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, tracker: StorageTracker, cast: torch.dtype | None = None
) -> tuple[list[int], list[int]]:
    """Live bytes before each child of `model` runs (ahead of the child's own hooks) and after
    the whole forward, and the most live bytes from each of those boundaries to the next; the
    forward (on x cast to `cast`, if given) and backward run under `tracker`."""
    counts: list[int] = []
    peaks: list[int] = []

    def boundary(*_) -> None:
        if tracker.peak is not None:
            peaks.append(tracker.peak)
        counts.append(tracker.live_bytes())
        tracker.peak = counts[-1]

    hooks = [
        *(layer.register_forward_pre_hook(boundary, prepend=True) for layer in model.children()),
        model.register_forward_hook(boundary),
    ]
    with tracker:
        out = model(x if cast is None else x.to(cast))
        tracker.peak = None
        F.mse_loss(out.to(y.dtype), y).backward()
    for hook in hooks:
        hook.remove()
    return counts, peaks
