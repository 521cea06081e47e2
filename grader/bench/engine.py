"""The grader itself: how long a world takes to start, and how long grading takes.

- World start for 1, 2 and 4 ranks, spawned (a fresh interpreter per worker, which imports torch)
  against forked (from the zygote, grader/sandbox/zygote.py): the median of a few starts, each
  until every rank has said "ready" (process group joined, sandbox in place). The zygote's own
  start, paid once per grading process, is its own row.
- Grading each module against the solutions (performance checks included) and against the
  stubs, and the whole course, each as a user runs it: `python -m grader grade` in a fresh
  process, so interpreter start, imports and collection are in the figure.
- The student's loop: `pytest assignments/collectives -k allgather` on the stubs, start to exit
  (the median of a few runs); and `python -m grader watch`, from a save to the verdict printed
  (as the watcher reports it), for a test of one process and one of four ranks.
"""

from __future__ import annotations

import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.table import Table

from grader.course import Course
from grader.sandbox.pool import World
from grader.sandbox.zygote import close_zygotes, start_zygote

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


def _pytest_s(course: Course, module: str, select: str) -> float:
    command = [sys.executable, "-m", "pytest", f"assignments/{module}", "-k", select, "-q", "-p", "no:cacheprovider"]
    began = time.perf_counter()
    subprocess.run(command, cwd=course.root, capture_output=True)
    return time.perf_counter() - began


def _watch_s(course: Course, module: str, select: str, saves: int = STARTS) -> float:
    """The median save-to-verdict time of `saves` saves (a touch of one file) under watch."""
    with tempfile.TemporaryDirectory() as folder:
        shutil.copytree(course.root / "solutions" / module, Path(folder) / module)
        touched = next((Path(folder) / module).glob("*.py"))
        command = [sys.executable, "-m", "grader", "watch", module, "--submission", folder, "-k", select]
        command += ["--max-gradings", str(saves + 1)]
        times: list[float] = []  # the first is the grading at start, not after a save
        with subprocess.Popen(command, cwd=course.root, stdout=subprocess.PIPE, text=True) as watch:
            for line in watch.stdout:
                if found := re.match(r"verdict ([\d.]+) s after the save", line):
                    times.append(float(found[1]))
                    if len(times) <= saves:
                        time.sleep(0.5)
                        touched.touch()
        return statistics.median(times[1:]) if len(times) > 1 else float("nan")


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
    loop = statistics.median(_pytest_s(course, "collectives", "allgather") for _ in range(STARTS))
    result.add_row("pytest assignments/collectives -k allgather (stubs)", "", "", "", f"{loop:.1f}")
    one = _watch_s(course, "collectives", "allreduce_time_ring_formula")
    four = _watch_s(course, "collectives", "reduce_scatter_returns")
    result.add_row("watch: save to verdict, one process", "", "", f"{one:.2f}", "")
    result.add_row("watch: save to verdict, 4 ranks", "", "", f"{four:.2f}", "")
    result.add_section()
    solutions, stubs = course.root / "solutions", course.root / "assignments"
    for name in course.modules:
        done, todo = _grading_s(course, solutions, [name]), _grading_s(course, stubs, [name])
        result.add_row(f"grade {name}", "", "", f"{done:.1f}", f"{todo:.1f}")
    modules = list(course.modules)
    whole_done, whole_todo = _grading_s(course, solutions, modules), _grading_s(course, stubs, modules)
    result.add_row("grade the whole course", "", "", f"{whole_done:.1f}", f"{whole_todo:.1f}")
    return result

