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


def fully_shard(model: nn.Module) -> nn.Module:
    """Shard every direct child of `model` (a "layer") over the ranks of the default group, in
    place, and return `model`. All of the model's parameters live in its children and require
    grad; no parameter is shared between layers.

    Layout (the grader reads it): the layer's parameters in layer.named_parameters() order,
    flattened and concatenated, zero-padded at the end to a multiple of the world size p and
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

    The grader counts every storage alive between layers (see train_fsdp): at most this rank's
    shards plus one layer. gloo's thread may hold a collective's buffers for a moment after a
    synchronous call returns; tensor.untyped_storage().resize_(0) releases a buffer at once.
    """
    ### BEGIN SOLUTION
    for layer in model.children():
        if list(layer.parameters()):
            _ShardedLayer(layer)
    return model
    ### END SOLUTION


### BEGIN SOLUTION
class _ShardedLayer:
    """One layer's shard, and the gather/free of its full parameters around forward and backward."""

    def __init__(self, layer: nn.Module) -> None:
        self.world_size, rank = dist.get_world_size(), dist.get_rank()
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
        self.layer, self.forward = layer, layer.forward
        self.full: torch.Tensor | None = None  # the gathered flat vector, while forward runs
        self.regathered: torch.Tensor | None = None  # the same, while backward needs it
        layer.forward = self.sharded_forward

    def gather(self) -> torch.Tensor:
        shard = self.layer.flat_shard.detach()
        full = shard.new_empty(shard.numel() * self.world_size)
        dist.all_gather_into_tensor(full, shard)
        return full

    def set_parameters(self, full: torch.Tensor | None) -> None:
        """Views of `full` as the layer's parameters (None: remove them)."""
        views = full[: sum(self.numels)].split(self.numels) if full is not None else [None] * len(self.names)
        for name, shape, view in zip(self.names, self.shapes, views):
            owner, _, attribute = name.rpartition(".")
            setattr(self.layer.get_submodule(owner), attribute, view.view(shape) if view is not None else None)

    def sharded_forward(self, *args, **kwargs):
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
    """full = all_gather(shard); backward: grad_shard = reduce_scatter(grad_full) / p."""

    @staticmethod
    def forward(ctx, shard: torch.Tensor, layer: _ShardedLayer) -> torch.Tensor:
        ctx.layer = layer
        return layer.gather()

    @staticmethod
    def backward(ctx, grad_full: torch.Tensor):
        _free(ctx.layer.regathered)  # backward through the layer is done: free its parameters
        ctx.layer.regathered = None
        grad_full = grad_full.clone()  # a buffer of our own, to free below
        grad_shard = grad_full.new_empty(grad_full.numel() // ctx.layer.world_size)
        dist.reduce_scatter_tensor(grad_shard, grad_full)
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
    backward), and a storage shrunk with untyped_storage().resize_(0) counts as freed.
    """

    def __init__(self, ignore: Iterable[torch.Tensor] = ()) -> None:
        super().__init__()
        self.storages: dict[int, StorageWeakRef] = {}
        self.ignored = {_key(t) for t in ignore}

    def track(self, tensor: torch.Tensor) -> None:
        self.storages.setdefault(_key(tensor), StorageWeakRef(tensor.untyped_storage()))

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        # Only storages the operator allocated: a view or an in-place result aliases an input.
        inputs = {_key(t) for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)}
        for leaf in tree_leaves(out):
            if isinstance(leaf, torch.Tensor) and _key(leaf) not in inputs:
                self.track(leaf)
        return out

    def live_bytes(self) -> int:
        alive = [ref for cdata, ref in self.storages.items() if cdata not in self.ignored and not ref.expired()]
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
) -> dict[str, object]:
    """Given (the grader calls it on every rank): make_model(variant) loaded from `state`, put
    through fully_shard, trained one step per batch (this rank's slices) on the mean squared
    error with an optimizer over model.parameters(): "sgd" (momentum 0.9) or "adamw" (weight
    decay 0.01).

    Memory is counted by a StorageTracker that is on while fully_shard, the forwards and the
    backwards run (not the optimizer's own step): every storage any operator allocates there,
    plus the original parameters' storages, while they stay alive. The first step only warms
    up; then the same count is taken on the plain (unsharded) model, whose only counted
    storages are activations. For every later step:

    - "resident_bytes": at each layer boundary (before each layer, after the last), the
      sharded model's live bytes minus the plain model's at the same boundary (= parameters);
    - "after_backward_bytes": live bytes once loss.backward() has returned;
    and "shards": each layer's final flat_shard, by layer name.
    """
    width, dtype = inputs.shape[-1], inputs.dtype
    model = make_model(variant, width).to(dtype)
    model.load_state_dict(state)
    tracker = StorageTracker()
    for p in model.parameters():
        tracker.track(p)
    with tracker:
        fully_shard(model)
    if optimizer == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    resident, after_backward = [], []
    for step, (x, y) in enumerate(zip(inputs, targets)):
        opt.zero_grad(set_to_none=True)
        counts = _boundary_counts(model, x, y, tracker)
        if step == 0:
            # The first operators run under a dispatch mode leave some garbage in reference
            # cycles: collect it once, then measure the activations of the plain model.
            gc.collect()
            plain = make_model(variant, width).to(dtype)
            plain.load_state_dict(state)
            activations = _boundary_counts(plain, x, y, StorageTracker(ignore=plain.parameters()))
        else:
            resident.append([n - a for n, a in zip(counts, activations)])
            after_backward.append(tracker.live_bytes())
        opt.step()
    return {
        "shards": {name: layer.flat_shard.detach().clone() for name, layer in model.named_children()},
        "resident_bytes": resident,
        "after_backward_bytes": after_backward,
    }


def _boundary_counts(model: nn.Module, x: torch.Tensor, y: torch.Tensor, tracker: StorageTracker) -> list[int]:
    """Live bytes before each child of `model` runs (ahead of the child's own hooks) and after
    the whole forward; the forward and backward run under `tracker`."""
    counts: list[int] = []
    hooks = [
        *(
            layer.register_forward_pre_hook(lambda *_: counts.append(tracker.live_bytes()), prepend=True)
            for layer in model.children()
        ),
        model.register_forward_hook(lambda *_: counts.append(tracker.live_bytes())),
    ]
    with tracker:
        F.mse_loss(model(x), y).backward()
    for hook in hooks:
        hook.remove()
    return counts
