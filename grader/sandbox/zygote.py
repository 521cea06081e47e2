"""The zygote: one process per grading run and device that has imported torch once and forks
every worker from there, so a world starts in milliseconds instead of seconds.

    grader ──socketpair──> zygote (torch, torch.distributed, the worker machinery imported)
                             └─ fork ─> worker: new session, its pipes, cwd, world marker,
                                        then rlimits, Landlock, guard, probes (run_worker)

Why a fork loop of our own rather than multiprocessing's forkserver:
- the channel is an unnamed socketpair that only the grader holds. A forkserver listens on a
  named Unix socket that any local process can connect to (without authentication before
  Python 3.14): a worker could ask it for a process outside the sandbox;
- each worker needs its own session, its output file as stdout and stderr, and the world's
  marker in the environment that other processes see (below), none of which forkserver children get;
- the zygote's environment is the worker environment of its device (Triton's interpreter on
  the CPU), which differs from the grader's.

Fork safety: the zygote never initialises CUDA, and it never runs a torch operator, so neither
OpenMP nor the intra-op thread pool exists when it forks; it checks that it has a single thread
before it answers "ready". Every worker creates its own CUDA context after the fork.

A worker cannot reach the zygote: it closes the channel and every descriptor it does not need
before anything else; under Landlock (which every submission's worker is under) it can neither
signal nor ptrace a process outside its domain, the zygote included (signals need ABI 6+). What
a worker changes in memory is its own copy: the next worker forks from the untouched zygote.
Were the zygote to die all the same, the grader starts a new one for the next world.

The world marker: the grader kills every process whose environment names the world's folder
(pool.py). On Linux, the environment other processes see is the block the process was started
with, which a fork inherits unchanged, so the zygote starts with a placeholder value of fixed
length and each worker overwrites those bytes in place with its world's folder (the technique of
setproctitle; grader/system/linux.py): the worker, what it forks, and what it executes all carry
the marker. Elsewhere (grader/system/portable.py) only what it executes does, and the world also
kills every descendant of its workers.

The zygote reaps a worker only when the grader asks for its exit status: until then the worker
stays a zombie, so its process id cannot be reused by an unrelated process that a later kill by
the grader would hit.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from grader import system

WORLD_MARKER = "GRADER_WORLD"  # environment variable naming the world's folder in its processes

MARKER_PLACEHOLDER = "zygote:" + "." * 1017  # 1024 bytes: room for a world folder's path
START_TIMEOUT_S = 120.0
REPLY_TIMEOUT_S = 30.0  # forking and answering take milliseconds; past this the zygote is stuck
_MESSAGE_LIMIT = 2**16


# ---- inside the zygote ------------------------------------------------------------------------


LEAN = "GRADER_ZYGOTE_LEAN"


def _preload(device: str) -> None:
    """Import what every worker imports, without touching a device or starting a thread. A lean
    zygote (LEAN set: a student's pytest run straight, which grades a few public tests and whose
    first worker is awaited) leaves torch._dynamo and triton to the workers that use them."""
    import numpy  # noqa: F401
    import torch
    import torch.distributed
    import torch.utils.flop_counter

    import grader.sandbox.worker  # noqa: F401

    if os.environ.get(LEAN):
        return
    # FlopCounterMode imports torch._dynamo the first time it is entered (1.5-4 s of CPU): once
    # here rather than in every worker that counts FLOPs, and never inside a timed call.
    import torch._dynamo  # noqa: F401

    if device == "cpu":
        with contextlib.suppress(ImportError):  # no Triton build for this system (macOS): see pytest_plugin
            import triton  # noqa: F401 - under TRITON_INTERPRET=1: no GPU driver is loaded


def serve(channel: socket.socket, device: str) -> None:
    """Answer the grader's requests until it closes the channel."""
    system.die_with_parent()  # Linux: at once; elsewhere when the channel closes
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the grader's to handle
    _preload(device)
    threads = system.thread_count()
    if threads != 1:
        problem = f"the zygote has {threads} threads after its imports: forking is unsafe"
        channel.send(json.dumps({"error": problem}).encode())
        return
    channel.send(json.dumps({"ready": os.getpid()}).encode())
    while True:
        try:
            data, fds, _, _ = socket.recv_fds(channel, _MESSAGE_LIMIT, 4)
        except OSError:
            return
        if not data:
            return
        request = json.loads(data)
        if request["op"] == "fork":
            reply: dict[str, Any] = {"pid": _fork_worker(channel, request, fds)}
        elif request["op"] == "wait":
            reply = {"returncode": _returncode(request["pid"], request["timeout"])}
        else:
            return
        channel.send(json.dumps(reply).encode())


def _returncode(pid: int, timeout: float) -> int | None:
    """The worker's exit status as subprocess gives it (-N: killed by signal N), None while it
    runs after `timeout` seconds. Reaps the worker."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return -signal.SIGKILL  # already reaped: only a worker that was killed is asked twice
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.005)


def _fork_worker(channel: socket.socket, request: dict[str, Any], fds: list[int]) -> int:
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            _become_worker(channel, request, fds)
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            with contextlib.suppress(Exception):
                sys.stdout.flush()
                sys.stderr.flush()
            os._exit(code)
    for fd in fds:
        os.close(fd)
    return pid


def _become_worker(channel: socket.socket, request: dict[str, Any], fds: list[int]) -> None:
    """In the forked child: what a fresh worker process had from Popen, then the worker itself."""
    request_fd, reply_fd, log_fd = fds
    os.setsid()  # a session of its own: the grader kills its process group
    channel.close()
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    _close_all_but({0, 1, 2, request_fd, reply_fd})
    workdir = request["workdir"]
    os.chdir(workdir)
    sys.path[0] = workdir  # as for `python -m` started in the world's folder
    system.mark_environment(request["marker"], workdir)
    for number in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD):
        signal.signal(number, signal.default_int_handler if number == signal.SIGINT else signal.SIG_DFL)
    random.seed()  # a fresh interpreter seeds from the OS; a fork would share the zygote's state
    if "numpy.random" in sys.modules:
        sys.modules["numpy.random"].seed()

    from grader.sandbox.worker import run_worker

    run_worker(argparse.Namespace(**request["options"], fd_in=request_fd, fd_out=reply_fd))


def _close_all_but(keep: set[int]) -> None:
    for fd in system.open_descriptors():
        if fd not in keep:
            with contextlib.suppress(OSError):
                os.close(fd)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--fd", type=int, required=True)
    parser.add_argument("--device", default="cpu")
    options = parser.parse_args()
    serve(socket.socket(fileno=options.fd), options.device)
    # Nothing to save: leave at once rather than tear torch and triton down (a second or more,
    # which the grader would wait for at every exit).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


# ---- in the grader ----------------------------------------------------------------------------


class ZygoteError(RuntimeError):
    """The zygote could not start, or stopped answering."""


class Zygote:
    """The grader's handle on one zygote: fork a worker, ask for a worker's exit status."""

    def __init__(self, device: str, environment: dict[str, str], marker: str) -> None:
        self.device = device
        self.folder = Path(tempfile.mkdtemp(prefix="grader-zygote-"))
        self._lock = threading.Lock()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._channel = ours
        log = self.folder / "zygote.log"
        with open(log, "wb") as output:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "grader.sandbox.zygote", "--fd", str(theirs.fileno()), "--device", device],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                cwd=self.folder,  # so the zygote's sys.path[0] holds nothing importable
                env={**environment, marker: MARKER_PLACEHOLDER},
            )
        theirs.close()
        # Reaped the moment it exits, whoever stopped it: a zombie child keeps a Jupyter kernel
        # from shutting down (ipykernel waits for its children to be gone, then is killed
        # before its atexit handlers, which remove this folder, ever run).
        threading.Thread(target=self.process.wait, name="zygote-reaper", daemon=True).start()
        self.pid = 0  # known once it said "ready": the first request waits for that

    def _await_ready(self) -> None:
        log = self.folder / "zygote.log"
        try:
            ready = self._receive(START_TIMEOUT_S)
        except ZygoteError as error:
            raise ZygoteError(f"{error}; its output:\n{log.read_text(errors='replace')[-2000:]}") from None
        if "error" in ready:
            raise ZygoteError(ready["error"])
        self.pid = ready["ready"]

    def _receive(self, timeout: float) -> dict[str, Any]:
        self._channel.settimeout(timeout)
        try:
            data = self._channel.recv(_MESSAGE_LIMIT)
        except (OSError, TimeoutError) as error:
            raise ZygoteError(f"the zygote did not answer ({error})") from None
        if not data:
            raise ZygoteError("the zygote exited")
        return json.loads(data)

    def _ask(self, request: dict[str, Any], fds: tuple[int, ...] = (), timeout: float = REPLY_TIMEOUT_S) -> Any:
        with self._lock:
            if not self.pid:
                self._await_ready()
            try:
                socket.send_fds(self._channel, [json.dumps(request).encode()], list(fds))
            except OSError as error:
                raise ZygoteError(f"the zygote is gone ({error})") from None
            return self._receive(timeout)

    def fork(self, options: dict[str, Any], workdir: Path, marker: str, fds: tuple[int, int, int]) -> int:
        """Fork a worker with the request pipe, reply pipe and output file `fds`; its pid."""
        request = {"op": "fork", "options": options, "workdir": str(workdir), "marker": marker}
        return self._ask(request, fds)["pid"]

    def returncode(self, pid: int, timeout: float) -> int | None:
        request = {"op": "wait", "pid": pid, "timeout": timeout}
        return self._ask(request, timeout=timeout + REPLY_TIMEOUT_S)["returncode"]

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._channel.close()
        if not self.pid:  # never ready: it may still be importing, and has no worker to wait for
            self.process.kill()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        for path in self.folder.glob("*"):
            path.unlink()
        with contextlib.suppress(OSError):
            self.folder.rmdir()


class ForkedProcess:
    """A worker forked by the zygote, with the part of subprocess.Popen's interface pool.py uses."""

    def __init__(self, zygote: Zygote, pid: int) -> None:
        self.zygote = zygote
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        return self._ask(0.0)

    def wait(self, timeout: float | None = None) -> int:
        code = self._ask(1e9 if timeout is None else timeout)
        if code is None:
            raise subprocess.TimeoutExpired(f"worker {self.pid}", timeout or 0.0)
        return code

    def _ask(self, timeout: float) -> int | None:
        if self.returncode is None:
            try:
                self.returncode = self.zygote.returncode(self.pid, timeout)
            except ZygoteError:  # the zygote is gone: the worker was adopted, its status is lost
                deadline = time.monotonic() + min(timeout, 5.0)
                while system.is_running(self.pid) and time.monotonic() < deadline:
                    time.sleep(0.01)
                self.returncode = None if system.is_running(self.pid) else -signal.SIGKILL
        return self.returncode


_zygotes: dict[str, Zygote] = {}
_zygotes_lock = threading.Lock()


def zygote_for(device: str, environment: dict[str, str], marker: str) -> Zygote:
    """This process's zygote for `device`, started on first use (and again if it died)."""
    with _zygotes_lock:
        zygote = _zygotes.get(device)
        if zygote is None or not zygote.alive:
            if zygote is not None:
                zygote.close()
            zygote = Zygote(device, environment, marker)
            _zygotes[device] = zygote
        return zygote


def worker_environment(device: str) -> dict[str, str]:
    """The environment of every worker on `device` (the world marker is added per world)."""
    env = {k: v for k, v in os.environ.items() if k not in ("GRADER_SEED", WORLD_MARKER)}  # the seed is the grader's
    env.update(
        OMP_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
        PYTHONDONTWRITEBYTECODE="1",  # a .pyc written mid-call would count as bytes sent
        PYTHONUNBUFFERED="1",  # what a rank printed reaches its log even if it then hangs
        TORCH_CPP_LOG_LEVEL="ERROR",
    )
    env.setdefault("GLOO_SOCKET_IFNAME", system.LOOPBACK)  # all ranks are on this machine
    env.update(system.worker_environment())
    if device == "cpu":
        env["TRITON_INTERPRET"] = "1"  # Triton kernels run in the interpreter, on the CPU
        env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def start_zygote(device: str, *, lean: bool = False) -> None:
    """Start this process's zygote for `device` now, without waiting for it to be ready; `lean`:
    one that is ready sooner, leaving torch._dynamo and triton to the workers that need them."""
    zygote_for(device, {**worker_environment(device), **({LEAN: "1"} if lean else {})}, WORLD_MARKER)


@atexit.register
def close_zygotes() -> None:
    with _zygotes_lock:
        for zygote in _zygotes.values():
            zygote.close()
        _zygotes.clear()


if __name__ == "__main__":
    main()
