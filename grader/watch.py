"""`python -m grader watch MODULE`: a module's public tests again, every time one of its files is saved.

One process stays warm between saves: Python, torch, pytest and the zygote (which forks the
workers, grader/sandbox/zygote.py) are loaded once, so a save costs only the tests themselves.
Each grading starts fresh workers, which import the files as they are now. The folder is polled
(modification time and size of every .py file, every POLL_S): no dependency, and a save from any
editor counts, even one that writes a new file and renames it over the old one.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

from grader.course import Course
from grader.report import render
from grader.results import GradeReport
from grader.sandbox.zygote import start_zygote

POLL_S = 0.1


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    """Every .py file of `folder` with its modification time and size."""
    found = {}
    for path in folder.glob("*.py"):
        try:
            status = path.stat()
        except OSError:  # removed while we looked
            continue
        found[path.name] = (status.st_mtime_ns, status.st_size)
    return found


def watch(
    course: Course,
    module: str,
    submission: Path,
    *,
    select: str | None = None,
    device: str = "cpu",
    max_gradings: int = 0,
    on_report: Callable[[GradeReport, float], None] | None = None,
) -> int:
    """Grade `module`'s public tests in `submission/<module>` now and after every save; stop
    after `max_gradings` gradings (0: never). `on_report(report, seconds since the save)`."""
    from grader.runner import grade

    folder = submission / module
    if not folder.is_dir():
        raise FileNotFoundError(f"there is no folder {folder}")
    start_zygote(device)
    seen: dict[str, tuple[int, int]] | None = None
    gradings = 0
    while not max_gradings or gradings < max_gradings:
        now = snapshot(folder)
        if now == seen:
            time.sleep(POLL_S)
            continue
        saved_at = _newest(folder, now, seen)
        seen = now
        report = grade(course, [module], submission, device=device, public_only=True, select=select)
        seconds = time.time() - saved_at
        gradings += 1
        if on_report is not None:
            on_report(report, seconds)
        else:
            sys.stdout.write(render(report, "text"))
            sys.stdout.write(f"verdict {seconds:.1f} s after the save; watching {folder} (Ctrl-C to stop)\n")
            sys.stdout.flush()
    return 0


def _newest(folder: Path, now: dict[str, tuple[int, int]], before: dict[str, tuple[int, int]] | None) -> float:
    """When the newest change was saved (now, for the first grading)."""
    if before is None:
        return time.time()
    changed = [now[name][0] for name in now if before.get(name) != now[name]]
    return max(changed) / 1e9 if changed else time.time()
