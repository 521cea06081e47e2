# Your working copy: replace every `raise NotImplementedError` with your implementation.
# (Generated from the course's reference by `python -m grader sync`.)
"""The conjugate communication operators of tensor and sequence parallelism (lecture 07,
sections 2 and 6).

Megatron-LM (Shoeybi et al. 2019) splits a transformer layer over the p ranks of a
tensor-parallel group with two operators that are each other's transpose:

    f = copy_to_tp_region        forward: identity           backward: all-reduce
    g = reduce_from_tp_region    forward: all-reduce         backward: identity

f sits where a replicated activation enters a column-parallel matmul (every rank needs the whole
input; each rank's gradient of it is partial, so the gradients are summed), g where the partial
outputs of a row-parallel matmul leave it (they are summed; the gradient of a sum reaches every
term unchanged).

Sequence parallelism (Korthikanti et al. 2022) keeps the activations between those regions
split along the sequence: each rank holds s/p positions. An all-reduce is a reduce-scatter then an
all-gather, so f and g split in two and move:

    gather_from_sequence_parallel_region          forward: all-gather     backward: reduce-scatter
    reduce_scatter_to_sequence_parallel_region    forward: reduce-scatter backward: all-gather

and scatter_to_sequence_parallel_region (forward: keep this rank's chunk, backward: all-gather)
enters a sequence region from a replicated tensor (after the embedding, in Megatron-LM). The names
are Megatron-Core's (megatron.core.tensor_parallel.mappings).

Every operator communicates within `group`, a torch.distributed ProcessGroup (None: the default
group, every rank of the world): p is the size of `group` and "rank r" a rank's index in it
(dist.get_rank(group)), so that one world can hold several tensor-parallel groups side by side.
Tensors in a sequence region are laid out sequence first, (s, ...), as in Megatron-LM: rank r
holds rows [r*s/p, (r+1)*s/p) of dimension 0, so that a gather along the sequence is a plain
concatenation of contiguous chunks.
"""

from __future__ import annotations

from typing import ClassVar

import torch
import torch.distributed as dist


def copy_to_tp_region(x: torch.Tensor, group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """The f operator: returns x unchanged in forward (a new tensor equal to x); in backward the
    gradient is summed over the ranks of `group` (None: the default group) with one
    dist.all_reduce, so each rank's x.grad is the sum of every member's gradient of the output.
    Differentiable (an autograd Function); x of any shape and floating dtype."""
    raise NotImplementedError("implement copy_to_tp_region (lectures/07-tensor-parallelism.md, section 2)")


def reduce_from_tp_region(x: torch.Tensor, group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """The g operator: forward returns the sum of x over the ranks of `group` (None: the default
    group; one dist.all_reduce, on a copy: the input is not modified); backward passes the gradient
    through unchanged (the identity). Differentiable; x of any shape and floating dtype."""
    raise NotImplementedError("implement reduce_from_tp_region (lectures/07-tensor-parallelism.md, section 2)")


def gather_from_sequence_parallel_region(x: torch.Tensor, group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """Forward: the x of every rank of `group` (its chunk of the sequence, dimension 0)
    concatenated in group-rank order along dimension 0, with one all-gather
    (dist.all_gather_single): a tensor of p * x.shape[0] rows on every member, p the size of
    `group`. Backward: the reduce-scatter of the gradient along dimension 0
    (dist.reduce_scatter_single): the x.grad of group rank r is the sum over the members of rows
    [r*n, (r+1)*n) of the output's gradient, n = x.shape[0]. Differentiable; x of any shape with
    at least one dimension."""
    raise NotImplementedError("implement gather_from_sequence_parallel_region (lectures/07-tensor-parallelism.md, section 6)")


def reduce_scatter_to_sequence_parallel_region(x: torch.Tensor, group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """The reverse of gather_from_sequence_parallel_region. Forward: the sum of x over the ranks
    of `group`, of which group rank r keeps rows [r*n, (r+1)*n) of dimension 0, n = x.shape[0] / p,
    p the size of `group` (one dist.reduce_scatter_single; the input is not modified). Backward:
    the gradient's chunks of all members gathered along dimension 0 (dist.all_gather_single), so
    x.grad has x's shape. x of any shape with at least one dimension. Raises ValueError when
    x.shape[0] is not a multiple of the size of `group`."""
    raise NotImplementedError("implement reduce_scatter_to_sequence_parallel_region (lectures/07-tensor-parallelism.md, section 6)")


def scatter_to_sequence_parallel_region(x: torch.Tensor, group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """Enters a sequence region from a tensor that is the same on every rank of `group`. Forward:
    group rank r's rows [r*n, (r+1)*n) of x, n = x.shape[0] / p, p the size of `group` (a new
    tensor; no communication). Backward: the gradient's chunks of all members gathered along
    dimension 0 (dist.all_gather_single), so x.grad has x's shape and is the same on every
    member. x of any shape with at least one dimension. Raises ValueError when x.shape[0] is not a
    multiple of the size of `group`."""
    raise NotImplementedError("implement scatter_to_sequence_parallel_region (lectures/07-tensor-parallelism.md, section 6)")


# (Write any helper functions you need here.)


class CollectiveCounter:
    """Given: counts, while it is on (`with CollectiveCounter() as counter:`), every collective
    called through the torch.distributed module (`dist.all_reduce`, ...), as
    counter.calls: a list of (kind, elements), kind one of "all_reduce", "all_gather",
    "reduce_scatter", "other", elements the size of the whole (reduced or gathered) tensor.
    Call the collectives as dist.<name> with `import torch.distributed as dist`: the grader
    counts them that way (and reads the bytes each rank sends from the kernel besides)."""

    KINDS: ClassVar[dict[str, str]] = {
        "all_reduce": "all_reduce",
        "all_gather_into_tensor": "all_gather",
        "all_gather_single": "all_gather",
        "all_gather": "all_gather",
        "reduce_scatter_tensor": "reduce_scatter",
        "reduce_scatter_single": "reduce_scatter",
        "reduce_scatter": "reduce_scatter",
        "broadcast": "other",
        "reduce": "other",
        "all_to_all": "other",
        "all_to_all_single": "other",
        "gather": "other",
        "scatter": "other",
        "send": "other",
        "recv": "other",
        "isend": "other",
        "irecv": "other",
    }

    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []
        self.originals: dict[str, object] = {}

    def __enter__(self) -> CollectiveCounter:
        for name, kind in self.KINDS.items():
            original = getattr(dist, name)
            self.originals[name] = original
            setattr(dist, name, self._counting(name, kind, original))
        return self

    def __exit__(self, *exc) -> None:
        for name, original in self.originals.items():
            setattr(dist, name, original)

    def _counting(self, name: str, kind: str, original):
        def counting(*args, **kwargs):
            self.calls.append((kind, _elements(name, args, kwargs)))
            return original(*args, **kwargs)

        return counting


def _elements(name: str, args: tuple, kwargs: dict) -> int:
    """The size of the whole tensor a collective reduces or gathers."""
    values = [*args, *kwargs.values()]
    tensors = [v for v in values if isinstance(v, torch.Tensor)]
    lists = [v for v in values if isinstance(v, list) and all(isinstance(t, torch.Tensor) for t in v)]
    if name in ("all_gather", "reduce_scatter") and lists:
        return sum(t.numel() for t in lists[0])
    if name.endswith(("_into_tensor", "_tensor", "_single")) and len(tensors) >= 2:
        return max(tensors[0].numel(), tensors[1].numel())
    return tensors[0].numel() if tensors else 0


def region_step(
    operator: str, x: torch.Tensor, grad_output: torch.Tensor, group: dist.ProcessGroup | None = None
) -> dict[str, object]:
    """Given (the grader calls it on every rank of `group`): y = operator(x, group), operator the
    name of one of the five functions above, then y.backward(grad_output). Returns "output" (y),
    "grad" (x.grad), "input_after_forward" (x as the forward left it) and the collectives counted
    in "forward" and in "backward" (CollectiveCounter.calls)."""
    regions = (
        copy_to_tp_region,
        reduce_from_tp_region,
        gather_from_sequence_parallel_region,
        reduce_scatter_to_sequence_parallel_region,
        scatter_to_sequence_parallel_region,
    )
    function = {f.__name__: f for f in regions}[operator]
    x = x.clone().requires_grad_(True)
    with CollectiveCounter() as forward:
        y = function(x, group)
    input_after_forward = x.detach().clone()
    with CollectiveCounter() as backward:
        y.backward(grad_output)
    return {
        "output": y.detach(),
        "grad": x.grad,
        "input_after_forward": input_after_forward,
        "forward": forward.calls,
        "backward": backward.calls,
    }
