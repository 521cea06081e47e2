"""Counters that run around a step inside the worker (captured before the student's import).

flops    torch.utils.flop_counter.FlopCounterMode: FLOPs of matmuls and attention
ops      a TorchDispatchMode counting every aten operator call (vectorised code does the same
         number of operations for T and 8T tokens; a Python loop over tokens does not)
largest  the same mode, recording the largest tensor any operator produced, in elements
         (a FlashAttention that never materialises seq_q x seq_k stays small)
reads    the same mode, listing every operator call as (name, bytes of the largest storage
         among its tensor inputs): the calls that read a big buffer (a KV block pool, a weight)
         are told apart from small index arithmetic around them
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.flop_counter import FlopCounterMode

PROBES = ("flops", "ops", "largest", "reads")


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
        yield figures
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
