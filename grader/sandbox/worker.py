"""A worker process: imports a submission and runs its functions when the grader asks.

Everything here runs beside untrusted code, so nothing here decides a grade: the worker only
runs the function and hands back what it returned. The grader measures time and bytes from its
own process. Start-up order matters: limits, stack dumps, the guard and the probes are in place
before any student code is imported, and the hidden suites are made unreadable (Landlock).

What the worker does check is refused outright, never scored: a submission that replaced one of
the grader's own functions, the probes' counters or a guarded library function (checked after
the import and after every step, against references taken before the import), and a step that
returned while leaving a thread of its own running.

A call is staged in two messages so that every rank starts together: the request (function and
arguments) is answered with "staged"; the grader then sends GO to every rank and times from there.
"""

from __future__ import annotations

import argparse
import faulthandler
import os
import resource
import signal
import sys
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

import grader.sandbox.loader as loader_module
import grader.sandbox.probes as probes_module
import grader.sandbox.protocol as protocol_module
from grader import system
from grader.sandbox.commlog import CommLog
from grader.sandbox.guard import ForbiddenCallError, Guard
from grader.sandbox.loader import LoadError, SubmissionLoader, student_traceback
from grader.sandbox.probes import measuring
from grader.sandbox.protocol import GO, REMOTE, encode_reply, is_plain, map_tensors, receive_request, to_grader
from grader.sandbox.script import Group, build_groups, substitute

# How long a thread the step started may take to finish after the step returned.
THREAD_GRACE_S = 0.2


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--fd-in", type=int, required=True)
    parser.add_argument("--fd-out", type=int, required=True)
    parser.add_argument("--rank", type=int, default=0)
    parser.add_argument("--world-size", type=int, default=1)
    parser.add_argument("--store", default="", help="FileStore path; empty: no process group")
    parser.add_argument("--submission", default="", help="module folder; empty: trusted worker")
    parser.add_argument("--stack-file", required=True)
    parser.add_argument("--comm-file", default="", help="where the rank says what it waits for (commlog.py)")
    parser.add_argument("--memory-mb", type=int, default=0)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--forbidden", default="", help="comma-separated dotted names")
    parser.add_argument("--file-size-mb", type=int, default=0, help="largest file (and output) it may write")
    parser.add_argument("--hide", action="append", default=[], help="a folder the submission may not read")
    return parser.parse_args()


def _limit_memory(megabytes: int) -> None:
    if megabytes > 0:
        limit = megabytes * 2**20
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def _limit_file_size(megabytes: int) -> None:
    """A write past the limit (printing gigabytes included: output goes to a file) ends the
    process with SIGXFSZ, which the grader reports."""
    if megabytes > 0:
        limit = megabytes * 2**20
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
        signal.signal(signal.SIGXFSZ, signal.SIG_DFL)  # Python ignores it, turning the kill into EFBIG


def _grader_functions() -> dict[str, Any]:
    """The objects a submission could replace to fake a reply, a count or a refusal, by name."""
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils.flop_counter import FlopCounterMode

    watched: dict[str, Any] = {}
    this = sys.modules[__name__]  # "__main__" when run as a worker: named as the module here
    for module in (probes_module, protocol_module, loader_module, this):
        label = "grader.sandbox.worker" if module is this else module.__name__
        for name, value in vars(module).items():
            if callable(value) and getattr(value, "__module__", "") == module.__name__:
                watched[f"{label}.{name}"] = value
                for attr, member in vars(value).items() if isinstance(value, type) else ():
                    if callable(member) or isinstance(member, (staticmethod, classmethod)):
                        watched[f"{label}.{name}.{attr}"] = member
    for cls in (FlopCounterMode, TorchDispatchMode):
        for attr, member in vars(cls).items():
            if callable(member):
                watched[f"{cls.__module__}.{cls.__name__}.{attr}"] = member
    watched["torch.save"] = torch.save
    watched["torch.load"] = torch.load
    watched["os.fsync"] = os.fsync  # the fsyncs probe counts the calls that reach it
    watched["os.fdatasync"] = os.fdatasync
    return watched


def _integrity_check(guard: Guard) -> Callable[[], list[str]]:
    """A check, bound now (before any student import), naming what has been replaced since."""
    watched = _grader_functions()

    def changed() -> list[str]:
        now = _grader_functions()
        replaced = [name for name, value in watched.items() if now.get(name) is not value]
        return replaced + guard.tampered()

    return changed


def _debugger_on_tty() -> None:
    """breakpoint() opens pdb on the terminal (stdin/stdout of a worker are not a terminal)."""

    def hook(*_: Any, **__: Any) -> None:
        import pdb

        tty = open("/dev/tty", "r+")  # noqa: SIM115 - lives as long as the debugging session
        pdb.Pdb(stdin=tty, stdout=tty).set_trace(sys._getframe(1))

    try:
        open("/dev/tty").close()
        sys.breakpointhook = hook
    except OSError:
        pass


def _classify(error: BaseException, directory: Path | None) -> dict[str, str]:

    if isinstance(error, LoadError):
        return {"kind": error.kind, "message": str(error)}
    if isinstance(error, ForbiddenCallError):
        return {"kind": "forbidden", "message": str(error)}
    if isinstance(error, SystemExit):
        return {"kind": "exit", "message": f"called sys.exit({error.code!r})"}
    if isinstance(error, KeyboardInterrupt):
        return {"kind": "exception", "message": "raised KeyboardInterrupt (the grader is not being interrupted)"}
    if isinstance(error, NotImplementedError):
        return {"kind": "not_implemented", "message": str(error)}
    text = student_traceback(error, directory) if directory else repr(error)
    if isinstance(error, MemoryError) or "can't allocate memory" in str(error):
        return {"kind": "memory", "message": text}
    return {"kind": "exception", "message": text, "type": type(error).__name__}


class Worker:
    def __init__(self, options: argparse.Namespace) -> None:
        self.options = options
        self.inbox = Connection(options.fd_in, writable=False)
        self.outbox = Connection(options.fd_out, readable=False)
        self.clock = time.perf_counter  # captured before any student import

        # NCCL needs a GPU per rank; a world larger than the machine's GPUs runs on gloo and CPU.
        gpus = torch.cuda.device_count() if options.device == "cuda" else 0
        self.on_gpu = gpus > 0 and (not options.store or gpus >= options.world_size)
        if self.on_gpu:
            torch.cuda.set_device(options.rank)
        if options.store:
            store = dist.FileStore(options.store, options.world_size)
            backend = "nccl" if self.on_gpu else "gloo"
            dist.init_process_group(backend, store=store, rank=options.rank, world_size=options.world_size)
        # Where a hang was: the step of the script, and the call a rank waits in (commlog.py).
        self.commlog = CommLog(Path(options.comm_file)) if options.submission and options.comm_file else None
        if self.commlog is not None and options.store:  # before the guard, which wraps these wrappers
            self.commlog.install()

        self.guard = Guard(filter(None, options.forbidden.split(",")))
        self.changed = _integrity_check(self.guard)
        self.send = self.outbox.send_bytes  # bound now: a submission cannot swap how replies go out
        system.hide_folders([Path(folder) for folder in options.hide])
        self.directory = Path(options.submission).resolve() if options.submission else None
        self.loader = SubmissionLoader(self.directory) if self.directory else None
        self.kept: dict[str, Any] = {}  # what a notebook's session built, by name
        self.groups: dict[Group, Any] = {}  # process groups the grader's steps named, built once

    def reply(self, message: Any) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        self.send(encode_reply(message))

    def tampering(self, function: str) -> dict[str, str] | None:
        """The error to report when the submission has replaced grader or guarded functions."""
        changed = self.changed()
        if not changed:
            return None
        shown = ", ".join(changed[:3]) + (f" and {len(changed) - 3} more" if len(changed) > 3 else "")
        message = (
            f"the submission changed {shown}: a submission may not modify the grader, its counters "
            f"or the library functions it refuses, so {function} is not graded"
        )
        return {"kind": "forbidden", "message": message}

    def resolve(self, step: dict[str, Any], saved: dict[str, Any]) -> Any:
        """The callable a step names: a method of a kept value ("cache.append", or deeper:
        "scheduler.cache.num_free_blocks"), a name in the student's file, or (in a trusted
        worker) a "package.module:function" import path."""
        receiver, dot, path = step["target"].partition(".")
        if dot and receiver in saved:
            found = saved[receiver]
            for attribute in path.split("."):
                found = getattr(found, attribute)
            return found
        if self.loader is not None:
            self.loader.use_given(step["given"])
            return self.loader.function(step["file"], step["target"])
        import importlib

        module, _, name = step["target"].partition(":")
        return getattr(importlib.import_module(module), name)

    def run(self, request: dict[str, Any]) -> None:
        steps = request["steps"]
        if self.on_gpu:  # tests build CPU tensors; the worker owns the device
            steps = map_tensors(steps, lambda t: t.cuda())
        try:  # import the student's files before the clock starts
            for step in steps:
                if "." not in step["target"]:
                    self.resolve(step, {})
        except BaseException as error:
            self.reply(("error", _classify(error, self.directory)))
            return
        if self.loader is not None and (problem := self.tampering(steps[0]["shown_as"])):
            self.reply(("error", problem))
            return
        self.reply(("staged",))
        if self.inbox.recv_bytes() != GO:  # cancelled: another rank could not start the call
            self.reply(("cancelled",))
            return

        # A notebook's session keeps its objects from call to call (grader/sandbox/remote.py).
        saved: dict[str, Any] = self.kept if request.get("keep") else {}
        if self.options.store:
            try:  # every member of a group reaches here before its call; none waits on the others
                build_groups(steps, self.groups)
            except Exception as error:
                self.reply(
                    (
                        "error",
                        {
                            "kind": "exception",
                            "type": type(error).__name__,
                            "message": f"the grader's process groups: {error}",
                        },
                    )
                )
                return
        results, figures = [], []
        start = self.clock()
        for index, step in enumerate(steps):
            if self.commlog is not None:
                self.commlog.at_step(index)
            threads = set(threading.enumerate())
            try:
                function = self.resolve(step, saved)
                args, kwargs = substitute((step["args"], step["kwargs"]), saved, self.groups)
                with self.guard.refusing(step["forbidden"], step["target"]), measuring(step["measure"]) as measured:
                    result = function(*args, **kwargs)
                if self.guard.attempts:
                    raise _refused(self.guard.attempts[0], step["target"])
            except BaseException as error:
                self.reply(("error", {**_classify(error, self.directory), "step": index}))
                return
            problem = self.tampering(step["shown_as"]) if self.loader is not None else None
            if problem is None and self.directory is not None:
                problem = _left_running(threads, step["shown_as"], self.directory)
            if problem is not None:
                self.reply(("error", {**problem, "step": index}))
                return
            if self.on_gpu and isinstance(result, torch.nn.Module):
                result = result.cuda()  # a module built from sizes alone starts on the CPU; its inputs are on the GPU
            if step["send_back"] == "auto":  # a plain value comes back, anything else stays here
                if not is_plain(result):
                    saved[step["save_as"]] = result
                    result = {REMOTE: step["save_as"], "type": type(result).__name__}
            elif step["save_as"]:
                saved[step["save_as"]] = result
            results.append(to_grader(result) if step["send_back"] else None)
            figures.append(measured)
        seconds = self.clock() - start

        if not is_plain(results):
            kind = next(type(r).__name__ for r in results if not is_plain(r))
            message = f"returned a {kind}; return tensors, numbers, or lists/tuples/dicts of them"
            self.reply(("error", {"kind": "bad_return", "message": message}))
            return
        returned_args = to_grader(list(args)) if request["return_args"] else None
        self.reply(("ok", results, returned_args, seconds, figures))

    def serve(self) -> None:
        self.reply(("ready", os.getpid()))
        while True:
            try:
                request = receive_request(self.inbox)
            except EOFError:
                return
            if request["op"] == "stop":
                return
            self.run(request)


def _runs_code_in(thread: threading.Thread, directory: Path) -> bool:
    """Whether `thread` is running the submission's code now (not, say, an idle pool thread
    that a library keeps for later)."""
    frame = sys._current_frames().get(thread.ident or -1)
    while frame is not None:
        if Path(frame.f_code.co_filename).resolve().is_relative_to(directory):
            return True
        frame = frame.f_back
    return False


def _left_running(before: set[threading.Thread], function: str, directory: Path) -> dict[str, str] | None:
    """The error for a step that returned while a thread it started still runs the submission's
    code (which could change results after they were sent, or work during later calls)."""
    deadline = time.monotonic() + THREAD_GRACE_S
    for thread in set(threading.enumerate()) - before:
        thread.join(max(0.0, deadline - time.monotonic()))
    running = [t for t in set(threading.enumerate()) - before if t.is_alive() and _runs_code_in(t, directory)]
    if not running:
        return None
    names = ", ".join(sorted(t.name for t in running))
    message = f"{function} returned but left a thread running ({names}): join every thread you start before returning"
    return {"kind": "thread", "message": message}


def _refused(name: str, function: str) -> BaseException:
    return ForbiddenCallError(
        f"{function} called {name} (and caught the refusal): the exercise is to build it yourself"
    )


def run_worker(options: argparse.Namespace) -> None:
    """Everything a worker does once its process exists, whether a fresh interpreter started it
    (`python -m grader.sandbox.worker`) or the zygote forked it (grader/sandbox/zygote.py)."""
    torch.set_num_threads(1)
    _limit_memory(options.memory_mb if options.device == "cpu" else 0)
    _limit_file_size(options.file_size_mb)
    stacks = open(options.stack_file, "a")  # noqa: SIM115 - open for the life of the process
    faulthandler.enable(stacks, all_threads=True)
    faulthandler.register(signal.SIGUSR1, stacks, all_threads=True)
    _debugger_on_tty()
    Worker(options).serve()
    if options.store and dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    run_worker(_parse())
