"""What a module's notebook uses to run the student's code: the same sandboxed workers as the
grader, with everything each rank prints shown in the notebook.

    from grader.notebook import open_module
    serving = open_module("serving")
    sched = serving.Scheduler(model, 24, 4, 16)     # runs in a worker; see grader/sandbox/remote.py
    sched.step()
    collectives = open_module("collectives")
    outputs = collectives.run(4, "ring_allreduce", [torch.ones(8) * r for r in range(4)])

The module folder is `$GRADER_SUBMISSION/<module>` when that variable is set (the project's
tests point it at solutions/), else the folder of the running notebook (`./`, e.g.
assignments/collectives/).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from grader.course import load_course
from grader.sandbox import Library, Submission
from grader.sandbox.remote import RemoteSession


def module_folder(module: str) -> Path:
    root = os.environ.get("GRADER_SUBMISSION")
    return Path(root) / module if root else Path.cwd()


class NotebookModule:
    """The student's module as a notebook sees it: its functions and classes are attributes that
    run in a worker (`serving.Scheduler(...)`), `run` starts a world of ranks, and the
    Submission's own methods (`function`, `script`, ...) are there too."""

    def __init__(self, submission: Submission) -> None:
        self.submission = submission
        self._session = RemoteSession(submission)

    def __getattr__(self, name: str) -> Any:
        if name in self.submission.module.functions:
            return lambda *args, **kwargs: self._session.call(name, args, kwargs)
        return getattr(self.submission, name)

    def run(self, world_size: int, function: str, args_per_rank: Sequence[Any], **kwargs: Any) -> list[Any]:
        """`function` on every rank of a world of `world_size` ranks at once: rank r is called
        with args_per_rank[r] (a tuple of arguments, or one argument); what each rank returned."""
        per_rank = [a if isinstance(a, tuple) else (a,) for a in args_per_rank]
        return self.submission.function(function).spmd(world_size, per_rank, kwargs).outputs


def open_module(module: str, time_limit_s: float | None = None) -> NotebookModule:
    """The student's `module`, run in worker processes; prints from every rank are echoed."""
    submission = Submission(load_course().module(module), module_folder(module), echo=True, time_limit_s=time_limit_s)
    return NotebookModule(submission)


def open_library() -> Library:
    """Trusted workers running the real library (e.g. gloo's all_reduce) for comparison."""
    return Library()
