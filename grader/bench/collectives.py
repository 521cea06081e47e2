"""Collectives: the reference ring_allreduce against gloo's all_reduce and the bandwidth bound.

Per message size (4 ranks, float32): bytes each rank sent (counted by the kernel) beside the
lower bound 2(p-1)/p * N, and the median time of the reference ring beside gloo's all_reduce,
measured in interleaved rounds in the same run, with the bus bandwidth 2(p-1)/p * N / time.
"""

from __future__ import annotations

import torch
from rich.table import Table

from grader.course import Course
from grader.perf import allreduce_bytes_bound, interleaved_ratio
from grader.sandbox import CallResult, Library, Submission

WORLD_SIZE = 4
SIZES = [2**10, 2**14, 2**18, 2**20, 2**22]  # float32 elements: 4 KiB .. 16 MiB


def _human(nbytes: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if nbytes < 1024:
            return f"{nbytes:.0f} {unit}"
        nbytes /= 1024
    return f"{nbytes:.0f} TiB"


def table(course: Course) -> Table:
    reference = Submission(course.module("collectives"), course.root / "solutions" / "collectives")
    library = Library()
    ring = reference.function("ring_allreduce")
    result = Table(title=f"collectives: ring_allreduce (reference) vs gloo all_reduce, {WORLD_SIZE} ranks")
    for column in (
        "size",
        "bound B/rank",
        "ring B/rank",
        "gloo B/rank",
        "ring ms",
        "gloo ms",
        "ratio",
        "ring bus GB/s",
    ):
        result.add_column(column, justify="right")
    try:
        for numel in SIZES:
            args = [(torch.ones(numel),) for _ in range(WORLD_SIZE)]
            nbytes = numel * 4
            mine = ring.spmd(WORLD_SIZE, args, return_result=False)
            theirs = library.spmd("grader.library:all_reduce", WORLD_SIZE, args, return_result=False)
            timing = interleaved_ratio(
                lambda args=args: ring.spmd(WORLD_SIZE, args, return_result=False),
                lambda args=args: library.spmd("grader.library:all_reduce", WORLD_SIZE, args, return_result=False),
                rounds=7,
            )
            bound = allreduce_bytes_bound(nbytes, WORLD_SIZE)
            result.add_row(
                _human(nbytes),
                f"{bound:,.0f}",
                _most_bytes(mine),
                _most_bytes(theirs),
                f"{timing.candidate_s * 1e3:.2f}",
                f"{timing.reference_s * 1e3:.2f}",
                f"{timing.ratio:.2f}",
                f"{bound / timing.candidate_s / 1e9:.2f}",
            )
    finally:
        reference.close()
        library.close()
    return result


def _most_bytes(call: CallResult) -> str:
    """The bytes of the rank that sent most, or "not counted" where the system keeps no count."""
    return "not counted" if call.counted_bytes is None else f"{max(call.counted_bytes):,}"
