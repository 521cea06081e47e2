"""Counters that run around a step inside the worker (captured before the student's import).

flops    torch.utils.flop_counter.FlopCounterMode: FLOPs of matmuls and attention
ops      a TorchDispatchMode counting every aten operator call (vectorised code does the same
         number of operations for T and 8T tokens; a Python loop over tokens does not)
largest  the same mode, recording the largest tensor any operator produced, in elements
         (a FlashAttention that never materialises seq_q x seq_k stays small)
reads    the same mode, listing every operator call as (name, bytes of the largest storage
         among its tensor inputs): the calls that read a big buffer (a KV block pool, a weight)
         are told apart from small index arithmetic around them
groups   every call a rank makes into a torch.distributed ProcessGroup (collective or point to
         point), as (operation, the group's global ranks, bytes this rank sends under the ring
         conventions of module collectives, the global peer of a send): what each group carries
p2p      the order of point-to-point messages and matmuls: every send and receive a rank posts
         (torch's ProcessGroup.send / recv, under dist.send, isend, batch_isend_irecv alike),
         every wait() on a request, and every matmul between them (the same mode): a receive
         is "overlapped" when at least one matmul ran after it was posted and before its wait
         (a ring that waits for the next block before computing on this one has none)
fsyncs   every os.fsync and os.fdatasync call, as (the file's path, its size at the call): a
         file whose last write came after its last fsync may still be lost by a crash
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.flop_counter import FlopCounterMode

from grader import system

PROBES = ("flops", "ops", "largest", "reads", "p2p", "groups", "fsyncs")
MATMULS = ("aten.mm.", "aten.bmm.", "aten.addmm.", "aten.baddbmm.", "aten._scaled_dot_product")
TRACE_CHARS = 600


class OperatorRecorder(TorchDispatchMode):
    """Counts operator calls, remembers the largest output tensor and, with `reads`, what each
    call read."""

    def __init__(self, reads: bool = False) -> None:
        super().__init__()
        self.calls = 0
        self.largest = 0
        self.largest_op = ""
        self.reads: list[tuple[str, int]] | None = [] if reads else None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if self.reads is not None:
            inputs = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
            self.reads.append((str(func), max((t.untyped_storage().nbytes() for t in inputs), default=0)))
        out = func(*args, **(kwargs or {}))
        self.calls += 1
        for leaf in tree_leaves(out):
            if isinstance(leaf, torch.Tensor) and leaf.numel() > self.largest:
                self.largest, self.largest_op = leaf.numel(), str(func)
        return out


class PointToPointOrder(TorchDispatchMode):
    """Records, in order, the sends and receives posted, the waits on their requests and the
    matmuls run, from the class methods every torch.distributed point-to-point call goes through
    (a submission that imported dist.isend under another name is still seen)."""

    def __init__(self) -> None:
        super().__init__()
        self.matmuls = 0
        self.sends = 0
        self.posted: dict[int, int] = {}  # id of a receive's request -> matmuls when it was posted
        self.overlapped = 0
        self.receives = 0
        self.waited = 0
        self.trace: list[str] = []
        self._restore: list[tuple[Any, str, Any]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if str(func).startswith(MATMULS):
            self.matmuls += 1
            if not self.trace or self.trace[-1] != "M":
                self.trace.append("M")
        return func(*args, **(kwargs or {}))

    def _patch(self, owner: Any, name: str, make: Any) -> None:
        original = getattr(owner, name, None)
        if original is None:
            return
        # put back what the class itself holds (a pybind11 method is an instancemethod there;
        # getattr gives the bare function, which would no longer bind to the instance)
        self._restore.append((owner, name, owner.__dict__.get(name, original)))
        setattr(owner, name, make(original))

    def __enter__(self):
        import torch.distributed as dist

        def sending(original):
            def send(pg, *args, **kwargs):
                self.sends += 1
                self.trace.append("S")
                return original(pg, *args, **kwargs)

            return send

        def receiving(original):
            def recv(pg, *args, **kwargs):
                work = original(pg, *args, **kwargs)
                self.receives += 1
                self.posted[id(work)] = self.matmuls
                self.trace.append("R")
                return work

            return recv

        def waiting(original):
            def wait(work, *args, **kwargs):
                posted = self.posted.pop(id(work), None)
                if posted is not None:
                    self.waited += 1
                    self.overlapped += self.matmuls > posted
                    self.trace.append("w" if self.matmuls > posted else "W")
                return original(work, *args, **kwargs)

            return wait

        process_group = dist.ProcessGroup
        self._patch(process_group, "send", sending)
        self._patch(process_group, "recv", receiving)
        self._patch(process_group, "recv_anysource", receiving)
        self._patch(dist.Work, "wait", waiting)
        return super().__enter__()

    def __exit__(self, *exc):
        for owner, name, original in reversed(self._restore):
            setattr(owner, name, original)
        return super().__exit__(*exc)

    def figures(self) -> dict[str, Any]:
        # a receive never waited on counts as overlapped when a matmul followed its post
        self.overlapped += sum(self.matmuls > posted for posted in self.posted.values())
        trace = "".join(self.trace)
        return {
            "receives": self.receives,
            "overlapped_receives": self.overlapped,
            "sends": self.sends,
            "matmuls": self.matmuls,
            "trace": trace if len(trace) <= TRACE_CHARS else trace[:TRACE_CHARS] + "...",
        }


def _nbytes(tensors: Any) -> int:
    return sum(t.numel() * t.element_size() for t in tree_leaves(tensors) if isinstance(t, torch.Tensor))


# ProcessGroup method -> (position of the argument whose bytes count, bytes sent per byte of it
# in a group of p): ring all-reduce 2(p-1)/p, all-gather p-1 of its input, reduce-scatter and
# all-to-all (p-1)/p of the whole, a send all of it. Each collective under every name torch
# dispatches it by: dist.all_gather_into_tensor, reduce_scatter_tensor and all_to_all_single
# call the `*_single` methods (torch 2.5 on), older releases `_allgather_base`,
# `_reduce_scatter_base` and `alltoall_base`.
GROUP_CALLS: dict[str, tuple[int, Any]] = {
    "allreduce": (0, lambda p: 2 * (p - 1) / p),
    "allreduce_coalesced": (0, lambda p: 2 * (p - 1) / p),
    "allgather": (1, lambda p: p - 1),
    "allgather_coalesced": (1, lambda p: p - 1),
    "_allgather_base": (1, lambda p: p - 1),
    "all_gather_single": (1, lambda p: p - 1),
    "all_gather_single_coalesced": (1, lambda p: p - 1),
    "allgather_into_tensor_coalesced": (1, lambda p: p - 1),
    "reduce_scatter": (1, lambda p: (p - 1) / p),
    "_reduce_scatter_base": (1, lambda p: (p - 1) / p),
    "reduce_scatter_single": (1, lambda p: (p - 1) / p),
    "reduce_scatter_single_coalesced": (1, lambda p: (p - 1) / p),
    "reduce_scatter_tensor_coalesced": (1, lambda p: (p - 1) / p),
    "alltoall_base": (1, lambda p: (p - 1) / p),
    "all_to_all_single": (1, lambda p: (p - 1) / p),
    "alltoall": (1, lambda p: (p - 1) / p),
    "broadcast": (0, lambda p: 1 if p > 1 else 0),
    "reduce": (0, lambda p: 1 if p > 1 else 0),
    "gather": (1, lambda p: 1 if p > 1 else 0),
    "scatter": (1, lambda p: 1 if p > 1 else 0),
    "send": (0, lambda p: 1),
    "recv": (0, lambda p: 0),
    "recv_anysource": (0, lambda p: 0),
}


class GroupTraffic:
    """Records every ProcessGroup call of the rank: its operation, the group's global ranks,
    the bytes the rank sends in it (ring conventions) and, for a send, the global peer."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self._restore: list[tuple[Any, str, Any]] = []

    def __enter__(self):
        import torch.distributed as dist

        def recording(name: str, original: Any) -> Any:
            position, factor = GROUP_CALLS[name]

            def call(pg, *args, **kwargs):
                ranks = dist.get_process_group_ranks(pg)
                payload = _nbytes(args[position]) if len(args) > position else 0
                record = {"op": name, "ranks": ranks, "bytes": factor(len(ranks)) * payload}
                if name == "send" and len(args) > 1:
                    record["peer"] = ranks[args[1]]
                self.calls.append(record)
                return original(pg, *args, **kwargs)

            return call

        owner = dist.ProcessGroup
        for name in GROUP_CALLS:
            original = getattr(owner, name, None)
            if original is not None:
                self._restore.append((owner, name, owner.__dict__.get(name, original)))
                setattr(owner, name, recording(name, original))
        return self

    def __exit__(self, *exc):
        for owner, name, original in reversed(self._restore):
            setattr(owner, name, original)


class FileSyncs:
    """Records every os.fsync and os.fdatasync call: the synced file's path and size then."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self._restore: list[tuple[str, Any]] = []

    def __enter__(self):
        def recording(original: Any) -> Any:
            def sync(fd, *args, **kwargs):
                number = fd if isinstance(fd, int) else fd.fileno()
                path = system.descriptor_path(number)
                self.calls.append({"path": path, "size": os.fstat(number).st_size})
                return original(fd, *args, **kwargs)

            return sync

        for name in ("fsync", "fdatasync"):
            original = getattr(os, name, None)
            if original is not None:
                self._restore.append((name, original))
                setattr(os, name, recording(original))
        return self

    def __exit__(self, *exc):
        for name, original in reversed(self._restore):
            setattr(os, name, original)


@contextmanager
def measuring(names: tuple[str, ...]) -> Iterator[dict[str, Any]]:
    """Run the body under the named probes; the dict is filled when the body ends."""
    unknown = set(names) - set(PROBES)
    if unknown:
        raise ValueError(f"unknown probes {sorted(unknown)}; known: {PROBES}")
    figures: dict[str, Any] = {}
    with ExitStack() as stack:
        flops = stack.enter_context(FlopCounterMode(display=False)) if "flops" in names else None
        recording = {"ops", "largest", "reads"} & set(names)
        recorder = stack.enter_context(OperatorRecorder(reads="reads" in names)) if recording else None
        order = stack.enter_context(PointToPointOrder()) if "p2p" in names else None
        traffic = stack.enter_context(GroupTraffic()) if "groups" in names else None
        syncs = stack.enter_context(FileSyncs()) if "fsyncs" in names else None
        yield figures
    if syncs is not None:
        figures["fsyncs"] = syncs.calls
    if traffic is not None:
        figures["groups"] = traffic.calls
    if order is not None:
        figures["p2p"] = order.figures()
    if flops is not None:
        figures["flops"] = int(flops.get_total_flops())
    if recorder is not None:
        if "ops" in names:
            figures["ops"] = recorder.calls
        if "largest" in names:
            figures["largest"] = recorder.largest
            figures["largest_op"] = recorder.largest_op
        if "reads" in names:
            figures["reads"] = recorder.reads
