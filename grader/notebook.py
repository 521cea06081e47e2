"""What a module's notebook uses to run the student's code: the same sandboxed workers as the
grader, with everything each rank prints shown in the notebook.

    from grader.notebook import open_module
    collectives = open_module("collectives")
    ring_allreduce = collectives.function("ring_allreduce")

The module folder is `$GRADER_SUBMISSION/<module>` when that variable is set (the project's
tests point it at solutions/), else the folder of the running notebook (`./`, e.g.
assignments/collectives/).
"""

from __future__ import annotations

import os
from pathlib import Path

from grader.course import load_course
from grader.sandbox import Library, Submission


def module_folder(module: str) -> Path:
    root = os.environ.get("GRADER_SUBMISSION")
    return Path(root) / module if root else Path.cwd()


def open_module(module: str, time_limit_s: float | None = None) -> Submission:
    """The student's `module`, run in worker processes; prints from every rank are echoed."""
    return Submission(load_course().module(module), module_folder(module), echo=True, time_limit_s=time_limit_s)


def open_library() -> Library:
    """Trusted workers running the real library (e.g. gloo's all_reduce) for comparison."""
    return Library()
