"""The grader itself: how long a world takes to start, the student's loop, and grading time.

- World start for 1, 2 and 4 ranks, spawned (a fresh interpreter per worker, which imports torch)
  against forked (from the zygote, grader/sandbox/zygote.py): each until every rank has said
  "ready" (process group joined, sandbox in place); forked starts are the median of a few, a
  spawned one is timed once (it only shows what the zygote saves). The zygote's own start, paid
  once per grading process, is its own row.
- The student's loop, in this repository and in a release written to a temporary folder (the
  template a student clones): one public test run straight with pytest on the stubs, start to
  exit, beside a bare `python -c "import torch"` in the same run (medians of 3, and their ratio:
  the goal is at most 2); and `python -m grader watch`, from a save to the verdict printed (as
  the watcher reports it), for a test of one process and one of four ranks.
- Grading as a user runs it, `python -m grader grade` in a fresh process (interpreter start,
  imports and collection in the figure): each module's solutions without the performance checks
  (`--no-perf`: the timed ones alone are minutes of the reference measured against libraries),
  and the whole course's stubs in one grading. The whole bench takes about four minutes.
"""

from __future__ import annotations

import os
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


def _grading_s(course: Course, submission: Path, modules: list[str], *options: str) -> float:
    with tempfile.TemporaryDirectory() as folder:
        command = [sys.executable, "-m", "grader", "grade", "--submission", str(submission), *modules, *options]
        command += ["--format", "json", "--out", str(Path(folder) / "results.json")]
        began = time.perf_counter()
        subprocess.run(command, cwd=course.root, capture_output=True, check=True)
        return time.perf_counter() - began


def _pytest_s(root: Path, module: str, select: str) -> float:
    """One run of a module's public tests selected by `select`, straight with pytest in `root`
    (the repository or a release, whose own grader it imports)."""
    command = [sys.executable, "-m", "pytest", f"assignments/{module}", "-k", select, "-q", "-p", "no:cacheprovider"]
    began = time.perf_counter()
    subprocess.run(command, cwd=root, capture_output=True, env={**os.environ, "PYTHONPATH": str(root)})
    return time.perf_counter() - began


def _import_torch_s() -> float:
    began = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import torch"], check=True)
    return time.perf_counter() - began


def _student_loop_rows(result: Table, course: Course, module: str, select: str) -> None:
    """pytest on one public test (stubs) against a bare `import torch`, in the repository and in
    a release, interleaved so that both see the same machine."""
    with tempfile.TemporaryDirectory() as folder:
        release = Path(folder) / "template"
        subprocess.run([sys.executable, "-m", "grader", "release", "--out", str(release)], cwd=course.root, check=True,
                       capture_output=True)  # fmt: skip
        runs: dict[str, list[float]] = {"torch": [], "repository": [], "template": []}
        for _ in range(STARTS):
            runs["torch"].append(_import_torch_s())
            runs["repository"].append(_pytest_s(course.root, module, select))
            runs["template"].append(_pytest_s(release, module, select))
    torch_s = statistics.median(runs["torch"])
    result.add_row("python -c 'import torch' (the floor)", "", "", "", f"{torch_s:.1f}")
    for where in ("repository", "template"):
        seconds = statistics.median(runs[where])
        result.add_row(
            f"pytest assignments/{module} -k {select} (stubs), {where}: {seconds / torch_s:.1f}x import torch",
            "", "", "", f"{seconds:.1f}",
        )  # fmt: skip


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
    result = Table(title="the grader: world start, the student's loop and grading time (fresh processes)")
    for column in ("measure", "spawned s", "forked s", "solutions s", "stubs s"):
        result.add_column(column, justify="right")
    result.add_row("zygote start (once per grading)", "", f"{_zygote_start_s():.2f}", "", "")
    for size in WORLD_SIZES:
        spawned = _world_start_s(size, "spawn")
        forked = statistics.median(_world_start_s(size, "fork") for _ in range(STARTS))
        result.add_row(f"world start, {size} rank{'s' if size > 1 else ''}", f"{spawned:.2f}", f"{forked:.3f}", "", "")
    close_zygotes()
    result.add_section()
    _student_loop_rows(result, course, "collectives", "allgather")
    one = _watch_s(course, "collectives", "allreduce_time_ring_formula")
    four = _watch_s(course, "collectives", "reduce_scatter_returns")
    result.add_row("watch: save to verdict, one process", "", "", f"{one:.2f}", "")
    result.add_row("watch: save to verdict, 4 ranks", "", "", f"{four:.2f}", "")
    result.add_section()
    solutions, stubs = course.root / "solutions", course.root / "assignments"
    total = 0.0
    for name in course.modules:
        done = _grading_s(course, solutions, [name], "--no-perf")
        total += done
        result.add_row(f"grade {name} (solutions --no-perf)", "", "", f"{done:.1f}", "")
    todo = _grading_s(course, stubs, list(course.modules))
    result.add_row("the course (solutions: the sum above; stubs: one grading)", "", "", f"{total:.1f}", f"{todo:.1f}")
    return result
