"""The grader's view of the system on Linux: /proc (proc(5)), prctl(2) and Landlock.

Everything is read from outside the measured process, by the grader, so that a submission
cannot change what is measured about it.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
from pathlib import Path

from grader.sandbox import landlock

NAME = "linux"
LOOPBACK = "lo"
_PR_SET_PDEATHSIG = 1


def _stat_fields(pid: int | str) -> list[str]:
    """/proc/<pid>/stat after the command name (which may hold spaces and parentheses): field
    3 of proc(5), the state, is [0]."""
    return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()


def _tick_s() -> float:
    return 1 / os.sysconf("SC_CLK_TCK")


def machine_busy_s() -> float:
    """CPU seconds all CPUs have spent on anything but idling since boot (/proc/stat, in ticks)."""
    try:
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return 0.0
    user, nice, system, _idle, _iowait, _irq, _softirq, steal = (fields + [0] * 8)[:8]
    return (user + nice + system + steal) * _tick_s()


def process_cpu_s(pid: int) -> float:
    """CPU seconds process `pid` has used, all its threads and the children it waited for."""
    try:
        fields = _stat_fields(pid)
    except OSError:
        return 0.0
    return sum(int(v) for v in fields[11:15]) * _tick_s()  # utime, stime, cutime, cstime: fields 14-17


def _io(pid: int) -> dict[str, int]:
    try:
        return {k: int(v) for k, v in (line.split(": ") for line in Path(f"/proc/{pid}/io").read_text().splitlines())}
    except (OSError, ValueError):
        return {}


def bytes_written(pid: int) -> int | None:
    """The kernel's count of bytes the process has written with the write/writev family
    (`wchar`: gloo's TCP transport included, a raw socket.send not); 0 once it is gone."""
    return _io(pid).get("wchar", 0)


def io_activity(pid: int) -> int:
    """Bytes the process has read and written so far (`rchar` + `wchar`), 0 once it is gone."""
    counters = _io(pid)
    return counters.get("rchar", 0) + counters.get("wchar", 0)


def any_thread_running(pid: int) -> bool:
    """Whether a thread of the process is running or runnable (state R), or in a disk wait (D:
    an fsync on a busy disk)."""
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return False
    for task in tasks:
        try:
            state = (task / "stat").read_text().rpartition(")")[2].split()[0]
        except (OSError, IndexError):
            continue
        if state in ("R", "D"):
            return True
    return False


def thread_count() -> int:
    """Threads of this process, native ones included (torch's pools are invisible to threading)."""
    return len(os.listdir("/proc/self/task"))


def open_descriptors() -> list[int]:
    """The file descriptors open in this process."""
    return [int(name) for name in os.listdir("/proc/self/fd")]


def descriptor_path(fd: int) -> str | None:
    """The path of the file descriptor `fd` of this process refers to."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None


def die_with_parent() -> None:
    """SIGKILL this process when its parent exits, however it exits (prctl PR_SET_PDEATHSIG)."""
    parent = os.getppid()
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(1)


def is_running(pid: int) -> bool:
    """Whether `pid` exists and is not a zombie (dead, waiting to be reaped)."""
    try:
        return _stat_fields(pid)[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


def descendants(pid: int) -> list[int]:
    """Every process below `pid`: its children, theirs, and so on."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            parent = int(_stat_fields(entry.name)[1])  # field 4, ppid
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(parent, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def unmarked_descendants(pids: list[int]) -> list[int]:
    """Processes below `pids` that carry no world marker: none, since every process a worker
    forks or executes inherits it (mark_environment)."""
    return []


def processes_with_environment(entry: str) -> list[int]:
    """Processes (other than this one) whose environment block holds `entry` ("NAME=value"), as
    /proc/<pid>/environ shows it: the block they were started with, or rewrote in place
    (mark_environment)."""
    wanted = entry.encode()
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            if wanted in (proc / "environ").read_bytes().split(b"\0"):
                found.append(int(proc.name))
    return found


def mark_environment(name: str, value: str) -> None:
    """Set `name` to `value` in this process's environment, in place in the block that
    /proc/self/environ shows (its old value must be at least as long), and in os.environ: what
    this process forks inherits the block, what it executes inherits os.environ."""
    fields = _stat_fields("self")
    start, end = int(fields[47]), int(fields[48])  # env_start and env_end: fields 50 and 51 of proc(5)
    block = ctypes.string_at(start, end - start)
    prefix = f"{name}=".encode()
    at = 0 if block.startswith(prefix) else block.find(b"\0" + prefix) + 1
    if at == 0 and not block.startswith(prefix):
        raise RuntimeError(f"{name} is not in this process's environment block")
    old_length = block.index(b"\0", at) - at - len(prefix)
    new = value.encode()
    if len(new) > old_length:
        raise RuntimeError(f"{name}={value} does not fit in the {old_length} bytes the zygote reserved")
    ctypes.memmove(start + at + len(prefix), new + b"\0" * (old_length - len(new)), old_length)
    os.environ[name] = value


def worker_environment() -> dict[str, str]:
    """Variables a process that forks workers after importing torch needs: none on Linux."""
    return {}


def hide_folders(hidden: list[Path]) -> bool:
    """Landlock (landlock.py): True once this process can no longer read beneath `hidden`."""
    return landlock.hide_folders(hidden)


def sandboxed() -> bool:
    """Whether hide_folders works here: the kernel offers Landlock."""
    return landlock.landlock_available()
