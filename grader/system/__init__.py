"""Everything the grader asks of the operating system, in one place.

The grader measures submissions from outside their processes (CPU time, bytes written, threads
running), keeps its workers from outliving it, and hides the hidden suites from them. How that
is done depends on the system:

- `linux.py` reads the proc file system, asks the kernel to kill a worker with its parent,
  and sandboxes workers with Landlock (landlock.py): every check is measured, and on a kernel
  with Landlock every submission is sandboxed.
- `portable.py` asks psutil and the standard library: on macOS, and on Linux when the
  environment sets GRADER_PORTABLE=1 (how `make test` proves it, tests/test_portable.py). It
  says what it cannot measure, never guesses: macOS keeps no count of the bytes a process
  writes, so a check on bytes gives no verdict and no points, with a message that says why
  (grader/perf.py's NotCountedHere); workers are not sandboxed, which every report says, and
  an instructor's batch grading refuses to run (`require_sandbox`).

Windows itself is not supported: the grader runs there through WSL2 (README), and refuses with
one line otherwise (`unsupported`).
"""

from __future__ import annotations

import os
import sys
from typing import Any

PORTABLE = "GRADER_PORTABLE"  # set to 1: the portable layer even on Linux
SUPPORTED = ("linux", "darwin")

# What each implementation provides (imported on first use, so that `unsupported` can answer on
# a system where neither would import):
_PROVIDED = {
    "NAME": "which implementation: linux or portable",
    "LOOPBACK": "the loopback interface's name, for gloo's sockets",
    "machine_busy_s": "CPU seconds the machine has spent busy since boot",
    "process_cpu_s": "a process's CPU seconds, with the children it waited for",
    "bytes_written": "bytes a process has written (None: not countable here)",
    "io_activity": "a counter that moves whenever a process reads, writes or runs",
    "any_thread_running": "whether a thread of a process is running or runnable",
    "thread_count": "threads of this process",
    "open_descriptors": "file descriptors open in this process",
    "descriptor_path": "the path a descriptor of this process refers to",
    "die_with_parent": "this process ends when its parent does",
    "is_running": "whether a process exists and is not a zombie",
    "descendants": "every process below a process",
    "processes_with_environment": "processes whose environment holds an entry",
    "unmarked_descendants": "processes below some that the world marker may not find",
    "mark_environment": "set a variable where other processes see it",
    "worker_environment": "what a process that forks workers needs set",
    "hide_folders": "the sandbox: folders a worker can no longer read",
    "sandboxed": "whether hide_folders can work on this machine",
}


def __getattr__(name: str) -> Any:
    if name not in _PROVIDED:
        raise AttributeError(f"module 'grader.system' has no attribute {name!r}")
    if sys.platform == "linux" and os.environ.get(PORTABLE) != "1":
        from grader.system import linux as implementation
    else:
        from grader.system import portable as implementation
    value = getattr(implementation, name)
    globals()[name] = value
    return value


UNSANDBOXED = (
    "not sandboxed: this system cannot hide the hidden suites from a submission's processes "
    "(Landlock, Linux 5.13+), so these grades are for self-study only"
)


def unsupported() -> str | None:
    """One line saying why the grader cannot run on this system, or None where it can."""
    if sys.platform in SUPPORTED:
        return None
    if sys.platform in ("win32", "cygwin", "msys"):
        return (
            "the grader runs on Linux and macOS; on Windows, run it inside WSL2 (README.md, 'Windows')"
        )
    return f"the grader runs on Linux and macOS, not on {sys.platform!r}"


class SandboxUnavailable(RuntimeError):
    """An instructor's grading on a system that cannot sandbox submissions."""


def require_sandbox(what: str) -> None:
    """Refuse `what` (an instructor's grading) where submissions would not be sandboxed."""
    if not sys.modules[__name__].sandboxed():  # the implementation's, loaded on first use
        raise SandboxUnavailable(
            f"{what} needs submissions sandboxed, and {UNSANDBOXED.removeprefix('not sandboxed: ')}; "
            "grade on Linux with Landlock"
        )
