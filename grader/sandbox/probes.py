"""Counters that run around a step inside the worker (captured before the student's import).

flops    torch.utils.flop_counter.FlopCounterMode: FLOPs of matmuls and attention
ops      a TorchDispatchMode counting every aten operator call (vectorised code does the same
         number of operations for T and 8T tokens; a Python loop over tokens does not)
largest  the same mode, recording the largest tensor any operator produced, in elements
         (a FlashAttention that never materialises seq_q x seq_k stays small)
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.flop_counter import FlopCounterMode

PROBES = ("flops", "ops", "largest")


class OperatorRecorder(TorchDispatchMode):
    """Counts operator calls and remembers the largest output tensor."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0
        self.largest = 0
        self.largest_op = ""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
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
        recorder = stack.enter_context(OperatorRecorder()) if {"ops", "largest"} & set(names) else None
        yield figures
    if flops is not None:
        figures["flops"] = int(flops.get_total_flops())
    if recorder is not None:
        if "ops" in names:
            figures["ops"] = recorder.calls
        if "largest" in names:
            figures["largest"] = recorder.largest
            figures["largest_op"] = recorder.largest_op
