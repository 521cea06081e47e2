"""`make bench`: for each module, the reference solution's figures beside the library a user
would otherwise pick and beside the physical bound, all measured in the same run; and the
grader's own figures ("engine": world start, grading time per module and for the course)."""

from __future__ import annotations

import importlib

from rich.console import Console

from grader.course import Course


def run_benchmarks(course: Course, modules: list[str]) -> None:
    console = Console(width=140)
    for name in modules:
        try:
            bench = importlib.import_module(f"grader.bench.{name}")
        except ModuleNotFoundError:
            console.print(f"{name}: no benchmark yet")
            continue
        console.print(bench.table(course))
