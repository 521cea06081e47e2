"""The grader's view of the system anywhere else: psutil and the standard library (macOS; on
Linux with GRADER_PORTABLE=1, which is how `make test` runs this file).

What it gives up, and how a report says so:
- Bytes a process wrote: macOS keeps no per-process I/O counters (psutil has none there), so
  `bytes_written` is None, on every system alike, and a check that reads bytes gives no verdict
  and no points, saying why (grader/sandbox/pool.py).
- Deadlocks are still found in about a second: with no byte counters, a world is "still" when
  no rank used CPU time (`io_activity`), and the stacks decide, as on Linux.
- No sandbox: hide_folders changes nothing, every report says "not sandboxed", and an
  instructor's grading refuses to run (grader/system/__init__.py).
- No "die with the parent": a zygote or worker whose grader died ends when its channel to the
  grader closes (it reads EOF), not at once.
- The world marker is set in os.environ only, so processes a submission executes carry it,
  but what it forks without executing is found by descent from the world's workers.
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

import psutil

NAME = "portable"
LOOPBACK = "lo0" if sys.platform == "darwin" else "lo"


def machine_busy_s() -> float:
    """CPU seconds all CPUs have spent on anything but idling since boot."""
    times = psutil.cpu_times()
    return times.user + getattr(times, "nice", 0.0) + times.system + getattr(times, "steal", 0.0)


def process_cpu_s(pid: int) -> float:
    """CPU seconds process `pid` has used, all its threads and the children it waited for."""
    try:
        times = psutil.Process(pid).cpu_times()
    except psutil.Error:
        return 0.0
    return times.user + times.system + times.children_user + times.children_system


def bytes_written(pid: int) -> int | None:
    """None: macOS keeps no count of the bytes a process writes (psutil has no io_counters
    there), and this layer behaves the same on every system, so that Linux tests prove it."""
    return None


def io_activity(pid: int) -> int:
    """A counter that moves whenever the process runs (its CPU time in microseconds): with no
    byte counts, a process that moves bytes shows by the CPU it takes to move them, and it
    stands still only while the process waits."""
    try:
        times = psutil.Process(pid).cpu_times()
    except psutil.Error:
        return 0
    return int(1e6 * (times.user + times.system))


def any_thread_running(pid: int) -> bool:
    """Whether the process is running or runnable (psutil reports a process's state, not each
    thread's: a process with one running thread is running)."""
    try:
        return psutil.Process(pid).status() in (psutil.STATUS_RUNNING, psutil.STATUS_DISK_SLEEP)
    except psutil.Error:
        return False


def thread_count() -> int:
    """Threads of this process, native ones included."""
    return psutil.Process().num_threads()


def open_descriptors() -> list[int]:
    """The file descriptors open in this process (/dev/fd lists them on macOS and Linux)."""
    descriptors = []
    for name in os.listdir("/dev/fd"):
        with contextlib.suppress(OSError):
            os.fstat(int(name))  # the listing's own descriptor is closed by now
            descriptors.append(int(name))
    return descriptors


def descriptor_path(fd: int) -> str | None:
    """The path of the file the descriptor `fd` of this process refers to."""
    if sys.platform == "darwin":
        import fcntl

        with contextlib.suppress(OSError):
            return os.fsdecode(fcntl.fcntl(fd, fcntl.F_GETPATH, bytes(1024)).rstrip(b"\0"))
    with contextlib.suppress(psutil.Error):
        for file in psutil.Process().open_files():
            if file.fd == fd:
                return file.path
    return None


def die_with_parent() -> None:
    """Nothing portable does it at once: a zygote or worker ends when it reads EOF from the
    channel its grader held (see the module's docstring)."""


def is_running(pid: int) -> bool:
    """Whether `pid` exists and is not a zombie (dead, waiting to be reaped)."""
    try:
        return psutil.Process(pid).status() not in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)
    except psutil.Error:
        return False


def descendants(pid: int) -> list[int]:
    """Every process below `pid`: its children, theirs, and so on."""
    try:
        return [child.pid for child in psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        return []


def unmarked_descendants(pids: list[int]) -> list[int]:
    """Processes below `pids` that may carry no world marker: all of them, since a process a
    worker forks without executing keeps the environment block the worker started with."""
    return [child for pid in pids for child in descendants(pid)]


def processes_with_environment(entry: str) -> list[int]:
    """Processes (other than this one) whose environment holds `entry` ("NAME=value")."""
    name, _, value = entry.partition("=")
    found = []
    for process in psutil.process_iter():
        if process.pid == os.getpid():
            continue
        with contextlib.suppress(psutil.Error, OSError):
            if process.environ().get(name) == value:
                found.append(process.pid)
    return found


def mark_environment(name: str, value: str) -> None:
    """Set `name` to `value` in os.environ (what this process executes inherits it)."""
    os.environ[name] = value


def worker_environment() -> dict[str, str]:
    """Variables a process that forks workers after importing torch needs: on macOS, the
    Objective-C runtime aborts a forked child that touches a class initialised in the parent
    unless told not to (the zygote never runs torch code before it forks)."""
    return {"OBJC_DISABLE_INITIALIZE_FORK_SAFETY": "YES"} if sys.platform == "darwin" else {}


def hide_folders(hidden: list[Path]) -> bool:
    """No sandbox here: nothing is hidden (False)."""
    return False


def sandboxed() -> bool:
    """Whether workers can be sandboxed: never with the portable layer."""
    return False
