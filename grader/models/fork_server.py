"""Given code of module reliability: the process that forks the ranks of the given code's small
gloo jobs, the flight recorder's (flight_recorder.py) and the profiler's (step_trace.py).

Why a server. A job needs a few fresh processes with torch loaded. Starting each as a new
interpreter costs seconds of importing torch on a small machine, and forking the caller is not
safe: the grader and notebooks run threads, and a child forked while another thread holds a lock
finds it locked forever. multiprocessing's forkserver would do it, but it re-runs the caller's
main script in every worker. So one process that runs no thread imports torch once and forks
every job's ranks from there (about 0.1 s to start a job instead of 3 s).

    server = ForkServer.get()                        # started on first use, then kept
    with server.job("grader.models.step_trace:_rank", 2, folder, port) as pids:
        statuses = server.wait(pids, timeout_s=120)  # [0, 0] once both ranks have exited

A job names a function as "module:function"; rank r of it calls function(r, world_size, *args)
with the arguments as strings, and exits 0 when it returns, 1 if it raised (the traceback goes
to the server's log, `tail()`). A module may define `_prepare()`, run once in the server before
its first job is forked, to load what every rank would otherwise load on its own.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import os
import signal
import subprocess
import sys
import tempfile
import threading
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path


class ForkServer:
    """The running server (one per process that uses it), talked to over its stdin and stdout:
    a line "target world_size arg ..." in, the ranks' pids out, then a line with each rank's
    exit status once they have all exited."""

    _running: ForkServer | None = None

    def __init__(self) -> None:
        self.log = tempfile.TemporaryFile()  # noqa: SIM115 (the ranks' stderr, shown when one fails)
        root = str(Path(__file__).resolve().parents[2])
        code = f"import sys; sys.path.insert(0, {root!r}); from {__name__} import _serve; _serve()"
        self.process = subprocess.Popen(
            [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True
        )
        # Reaped as soon as it exits: a Jupyter kernel waits for its zombie children at shutdown.
        threading.Thread(target=self.process.wait, name="fork-server-reaper", daemon=True).start()
        self._one_job = threading.Lock()
        self._statuses: list[int] | None = None  # the job's, once its ranks have all exited
        self._reader: threading.Thread | None = None  # a wait's, reading that line

    @classmethod
    def get(cls) -> ForkServer:
        """The server, started if it is not running."""
        if cls._running is None or cls._running.process.poll() is not None:
            cls._running = cls()
            atexit.register(cls._running.process.kill)
        return cls._running

    @contextlib.contextmanager
    def job(self, target: str, world_size: int, *args: object) -> Iterator[list[int]]:
        """Fork `world_size` ranks running `target` ("module:function") with `args` (as strings
        without spaces) and give their pids, rank 0 first; on leaving, kill the ranks still
        running and wait until the server has reaped them. One job at a time."""
        words = [target, str(world_size), *map(str, args)]
        if any(not word or len(word.split()) != 1 for word in words):
            raise ValueError(f"a job's target and arguments are single words: {words}")
        with self._one_job:
            self.process.stdin.write(" ".join(words) + "\n")
            self.process.stdin.flush()
            pids = [int(pid) for pid in self.process.stdout.readline().split()]
            self._statuses, self._reader = None, None
            try:
                yield pids
            finally:
                if self._statuses is None:
                    self._kill(pids)
                    if self._reader is not None:  # a wait that timed out is still reading the line
                        self._reader.join()
                    else:
                        self._read_statuses()

    def wait(self, pids: list[int], timeout_s: float) -> list[int] | None:
        """Inside `job`: the ranks' exit statuses once they have all exited, or None if they
        still run after `timeout_s` seconds (they are killed when the job is left)."""
        self._reader = threading.Thread(target=self._read_statuses, daemon=True)
        self._reader.start()
        self._reader.join(timeout_s)
        return None if self._reader.is_alive() else self._statuses

    def tail(self) -> str:
        """The end of the ranks' and the server's standard error."""
        self.log.seek(0)
        return self.log.read().decode(errors="replace")[-2000:]

    def _read_statuses(self) -> None:
        line = self.process.stdout.readline().split()
        self._statuses = [int(status) for status in line[1:]]

    @staticmethod
    def _kill(pids: list[int]) -> None:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _serve() -> None:
    """The server's loop: a job's line in, its ranks' pids out, then "done STATUS ..." once they
    have all exited."""
    prepared: set[str] = set()
    for line in sys.stdin:
        target, world_size, *args = line.split()
        module_name, _, name = target.partition(":")
        module = importlib.import_module(module_name)
        if module_name not in prepared and hasattr(module, "_prepare"):
            module._prepare()  # in the server, once: every rank forked after inherits it
            prepared.add(module_name)
        pids = [_fork(getattr(module, name), rank, int(world_size), args) for rank in range(int(world_size))]
        print(*pids, flush=True)
        statuses = [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in pids]
        print("done", *statuses, flush=True)


def _fork(function: Callable[..., object], rank: int, world_size: int, args: list[str]) -> int:
    """Fork rank `rank`: it runs function(rank, world_size, *args) and exits; the parent gets its pid."""
    pid = os.fork()
    if pid:
        return pid
    status = 1
    try:
        devnull = os.open(os.devnull, os.O_RDWR)
        os.dup2(devnull, 0)
        os.dup2(devnull, 1)
        function(rank, world_size, *args)
        status = 0
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stderr.flush()
        os._exit(status)  # never run the server's own exit handlers, nor wait for gloo's threads
