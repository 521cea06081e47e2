"""`make bench` for module attention: its GPU kernel's row of grader/bench/kernels.py ("no GPU" on a CPU)."""

from __future__ import annotations

from rich.table import Table

from grader.bench.kernels import module_table
from grader.course import Course


def table(course: Course) -> Table:
    return module_table(course, "attention")
