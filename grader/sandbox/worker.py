"""A worker process: imports a submission and runs its functions when the grader asks.

Everything here runs beside untrusted code, so nothing here decides a grade: the worker only
runs the function and hands back what it returned. The grader measures time and bytes from its
own process. Start-up order matters: limits, stack dumps, the guard and the probes are in place
before any student code is imported.

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
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from grader.sandbox.guard import ForbiddenCallError, Guard
from grader.sandbox.loader import LoadError, SubmissionLoader, student_traceback
from grader.sandbox.probes import measuring
from grader.sandbox.protocol import GO, encode_reply, is_plain, map_tensors, receive_request, to_grader
from grader.sandbox.script import substitute


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--fd-in", type=int, required=True)
    parser.add_argument("--fd-out", type=int, required=True)
    parser.add_argument("--rank", type=int, default=0)
    parser.add_argument("--world-size", type=int, default=1)
    parser.add_argument("--store", default="", help="FileStore path; empty: no process group")
    parser.add_argument("--submission", default="", help="module folder; empty: trusted worker")
    parser.add_argument("--stack-file", required=True)
    parser.add_argument("--memory-mb", type=int, default=0)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--forbidden", default="", help="comma-separated dotted names")
    return parser.parse_args()


def _limit_memory(megabytes: int) -> None:
    if megabytes > 0:
        limit = megabytes * 2**20
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


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
        return {"kind": "exception", "message": "raised KeyboardInterrupt"}
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

        torch.set_num_threads(1)
        # NCCL needs a GPU per rank; a world larger than the machine's GPUs runs on gloo and CPU.
        gpus = torch.cuda.device_count() if options.device == "cuda" else 0
        self.on_gpu = gpus > 0 and (not options.store or gpus >= options.world_size)
        if self.on_gpu:
            torch.cuda.set_device(options.rank)
        if options.store:
            store = dist.FileStore(options.store, options.world_size)
            backend = "nccl" if self.on_gpu else "gloo"
            dist.init_process_group(backend, store=store, rank=options.rank, world_size=options.world_size)

        self.guard = Guard(filter(None, options.forbidden.split(",")))
        self.directory = Path(options.submission).resolve() if options.submission else None
        self.loader = SubmissionLoader(self.directory) if self.directory else None

    def reply(self, message: Any) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        self.outbox.send_bytes(encode_reply(message))

    def resolve(self, step: dict[str, Any], saved: dict[str, Any]) -> Any:
        """The callable a step names: a method of a kept value, a name in the student's file,
        or (in a trusted worker) a "package.module:function" import path."""
        receiver, dot, method = step["target"].partition(".")
        if dot and receiver in saved:
            return getattr(saved[receiver], method)
        if self.loader is not None:
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
        self.reply(("staged",))
        if self.inbox.recv_bytes() != GO:  # cancelled: another rank could not start the call
            self.reply(("cancelled",))
            return

        saved: dict[str, Any] = {}
        results, figures = [], []
        start = self.clock()
        for index, step in enumerate(steps):
            try:
                function = self.resolve(step, saved)
                args, kwargs = substitute((step["args"], step["kwargs"]), saved)
                with self.guard.refusing(step["forbidden"], step["target"]), measuring(step["measure"]) as measured:
                    result = function(*args, **kwargs)
                if self.guard.attempts:
                    raise _refused(self.guard.attempts[0], step["target"])
            except BaseException as error:
                self.reply(("error", {**_classify(error, self.directory), "step": index}))
                return
            if self.on_gpu and isinstance(result, torch.nn.Module):
                result = result.cuda()  # a module built from sizes alone starts on the CPU; its inputs are on the GPU
            if step["save_as"]:
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


def _refused(name: str, function: str) -> BaseException:
    return ForbiddenCallError(
        f"{function} called {name} (and caught the refusal): the exercise is to build it yourself"
    )


def main() -> None:
    options = _parse()
    _limit_memory(options.memory_mb if options.device == "cpu" else 0)
    stacks = open(options.stack_file, "a")  # noqa: SIM115 - open for the life of the process
    faulthandler.enable(stacks, all_threads=True)
    faulthandler.register(signal.SIGUSR1, stacks, all_threads=True)
    _debugger_on_tty()
    Worker(options).serve()
    if options.store and dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
