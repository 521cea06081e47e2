"""Running untrusted submissions: worker processes, worlds of ranks, and the proxy tests call.

The grader's process never imports a student's code. `Submission` proxies each call into a
worker process (or a world of N workers joined by torch.distributed); the worker returns outputs,
and the grader measures time and bytes sent from outside, then decides.

The names below are imported on first use: `grader.sandbox.zygote` and `grader.sandbox.errors`
load without torch, so a pytest run can start the zygote (which imports torch in a process of its
own) before it imports torch itself.
"""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "SubmissionError": "grader.sandbox.errors",
    "CallResult": "grader.sandbox.pool",
    "Group": "grader.sandbox.script",
    "Saved": "grader.sandbox.script",
    "Step": "grader.sandbox.script",
    "Library": "grader.sandbox.submission",
    "RemoteFunction": "grader.sandbox.submission",
    "Submission": "grader.sandbox.submission",
}
__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'grader.sandbox' has no attribute {name!r}")
    value = getattr(importlib.import_module(_WHERE[name]), name)
    globals()[name] = value
    return value
