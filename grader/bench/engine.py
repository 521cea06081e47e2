"""The grader itself: how long a world takes to start, and how long grading takes.

- World start for 1, 2 and 4 ranks, spawned (a fresh interpreter per worker, which imports torch)
  against forked (from the zygote, grader/sandbox/zygote.py): the median of a few starts, each
  until every rank has said "ready" (process group joined, sandbox in place). The zygote's own
  start, paid once per grading process, is its own row.
- Grading each module against the solutions (performance checks included) and against the
  stubs, and the whole course, each as a user runs it: `python -m grader grade` in a fresh
  process, so interpreter start, imports and collection are in the figure.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.table import Table

from grader.course import Course
from grader.sandbox.pool import World, start_zygote
from grader.sandbox.zygote import close_zygotes

WORLD_SIZES = (1, 2, 4)
STARTS = 3


def _world_start_s(size: int, start: str) -> float:
    began = time.perf_counter()
    world = World(size, submission=None, distributed=size > 1, start=start)
    seconds = time.perf_counter() - began
    world.close()
    return seconds


def _zygote_start_s() -> float:
    """From no zygote to one ready to fork: the first world's start less a later one's."""
    close_zygotes()
    began = time.perf_counter()
    start_zygote("cpu")
    _world_start_s(1, "fork")  # waits for the zygote's "ready"
    first_world = time.perf_counter() - began
    return first_world - _world_start_s(1, "fork")


def _grading_s(course: Course, submission: Path, modules: list[str]) -> float:
    with tempfile.TemporaryDirectory() as folder:
        command = [sys.executable, "-m", "grader", "grade", "--submission", str(submission), *modules]
        command += ["--format", "json", "--out", str(Path(folder) / "results.json")]
        began = time.perf_counter()
        subprocess.run(command, cwd=course.root, capture_output=True, check=True)
        return time.perf_counter() - began


def table(course: Course) -> Table:
    result = Table(title="the grader: world start (median of 3) and grading time (one run, fresh process)")
    for column in ("measure", "spawned s", "forked s", "solutions s", "stubs s"):
        result.add_column(column, justify="right")
    result.add_row("zygote start (once per grading)", "", f"{_zygote_start_s():.2f}", "", "")
    for size in WORLD_SIZES:
        spawned = statistics.median(_world_start_s(size, "spawn") for _ in range(STARTS))
        forked = statistics.median(_world_start_s(size, "fork") for _ in range(STARTS))
        result.add_row(f"world start, {size} rank{'s' if size > 1 else ''}", f"{spawned:.2f}", f"{forked:.3f}", "", "")
    close_zygotes()
    result.add_section()
    solutions, stubs = course.root / "solutions", course.root / "assignments"
    for name in course.modules:
        done, todo = _grading_s(course, solutions, [name]), _grading_s(course, stubs, [name])
        result.add_row(f"grade {name}", "", "", f"{done:.1f}", f"{todo:.1f}")
    modules = list(course.modules)
    whole_done, whole_todo = _grading_s(course, solutions, modules), _grading_s(course, stubs, modules)
    result.add_row("grade the whole course", "", "", f"{whole_done:.1f}", f"{whole_todo:.1f}")
    return result

