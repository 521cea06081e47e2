"""The proxies tests call: a submission's functions, and the trusted library reference.

    ring_allreduce = submission.function("ring_allreduce")
    result = ring_allreduce.spmd(world_size=4, args_per_rank=[(t,) for t in tensors])
    reference = library.spmd("grader.library:all_reduce", 4, [(t,) for t in tensors])

Worlds are pooled by size, so process start-up is paid once per module and world size; a world
that hung or crashed is replaced by a fresh one on the next call.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from grader.course import Module
from grader.sandbox.errors import SubmissionError
from grader.sandbox.pool import CallResult, World


def _shown(path: Path) -> str:
    try:
        return os.path.relpath(path)
    except ValueError:
        return str(path)


class _Worlds:
    """Worlds kept alive between calls, keyed by (size, distributed)."""

    def __init__(self, submission: Path | None, device: str, memory_mb: int, forbidden: tuple[str, ...]):
        self._options = dict(submission=submission, device=device, memory_mb=memory_mb, forbidden=forbidden)
        self._worlds: dict[tuple[int, bool], World] = {}

    def get(self, size: int, distributed: bool) -> World:
        world = self._worlds.get((size, distributed))
        if world is None or not world.alive:
            world = World(size, distributed=distributed, **self._options)
            self._worlds[(size, distributed)] = world
        return world

    def close(self) -> None:
        for world in self._worlds.values():
            world.close()
        self._worlds.clear()


def _request(function: str, args: Sequence[Any], kwargs: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"op": "call", "function": function, "args": tuple(args), "kwargs": dict(kwargs), **fields}


class Submission:
    """One module of one submission (a folder of the student's files), run only in workers."""

    def __init__(
        self,
        module: Module,
        directory: Path,
        *,
        device: str = "cpu",
        echo: bool = False,
        time_limit_s: float | None = None,
    ) -> None:
        self.module = module
        self.directory = directory.resolve()
        self.device = device
        self.echo = echo
        self.time_limit_s = time_limit_s if time_limit_s is not None else module.time_limit_s
        forbidden = tuple(sorted({n for f in module.functions.values() for n in f.forbidden}))
        memory = module.memory_limit_mb
        self._worlds = _Worlds(self.directory, device, memory, forbidden)
        # (function, world size) -> why it is not run again: a call that hung or crashed once
        # is not retried at that world size, which keeps the grading time of a broken
        # submission bounded by (functions x world sizes) time limits.
        self._broken: dict[tuple[str, int], SubmissionError] = {}

    def function(self, name: str) -> RemoteFunction:
        return RemoteFunction(self, name)

    def run(
        self,
        name: str,
        requests_args: list[tuple[Sequence[Any], dict[str, Any]]],
        *,
        distributed: bool,
        return_args: bool,
        return_result: bool,
        time_limit_s: float | None,
    ) -> CallResult:
        spec = self.module.function(name)
        if not self.directory.is_dir():
            raise SubmissionError("import", name, f"the submission has no folder {_shown(self.directory)}")
        requests = [
            _request(
                name,
                args,
                kwargs,
                file=spec.file,
                forbidden=spec.forbidden,
                return_args=return_args,
                return_result=return_result,
            )
            for args, kwargs in requests_args
        ]
        key = (name, len(requests))
        if key in self._broken:
            raise self._broken[key]
        world = self._worlds.get(len(requests), distributed)
        limit = time_limit_s if time_limit_s is not None else self.time_limit_s
        try:
            result = world.call(requests, limit, name)
        except SubmissionError as error:
            if error.kind in ("timeout", "crash"):
                verb = "hung" if error.kind == "timeout" else "crashed"
                where = f" at world size {len(requests)}" if distributed else ""
                message = f"not run: {name} {verb}{where} earlier in this run (see the first failure)"
                self._broken[key] = SubmissionError(error.kind, name, message)
            if self.echo:
                self._echo(error.printed)
            raise self._explain(error, spec.file, spec.section) from None
        if self.echo:
            self._echo(result.printed)
        return result

    def _explain(self, error: SubmissionError, file: str, section: str) -> SubmissionError:
        """Rewrite a not-implemented error into the instruction the student needs."""
        if error.kind != "not_implemented":
            return error
        path = _shown(self.directory / file)
        message = (
            f"{error.function} is not implemented yet: implement it in {path} "
            f"(see {self.module.lecture}, section {section})"
        )
        return SubmissionError("not_implemented", error.function, message)

    def _echo(self, printed: list[str]) -> None:
        for rank, text in enumerate(printed):
            for line in text.splitlines():
                prefix = f"[rank {rank}] " if len(printed) > 1 else ""
                sys.stdout.write(f"{prefix}{line}\n")

    def restart(self) -> None:
        """Fresh workers (which import the files again) and a clean slate for hung functions."""
        self._worlds.close()
        self._broken.clear()

    def close(self) -> None:
        self._worlds.close()


class RemoteFunction:
    """A student's function, callable from tests as if it were local."""

    def __init__(self, submission: Submission, name: str) -> None:
        self.submission = submission
        self.name = name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.run(args, kwargs).output

    def run(
        self,
        args: Sequence[Any] = (),
        kwargs: dict[str, Any] | None = None,
        *,
        return_args: bool = False,
        return_result: bool = True,
        time_limit_s: float | None = None,
    ) -> CallResult:
        """One call in a single worker process (no process group)."""
        return self.submission.run(
            self.name,
            [(args, kwargs or {})],
            distributed=False,
            return_args=return_args,
            return_result=return_result,
            time_limit_s=time_limit_s,
        )

    def spmd(
        self,
        world_size: int,
        args_per_rank: Sequence[Sequence[Any]],
        kwargs: dict[str, Any] | None = None,
        *,
        return_args: bool = False,
        return_result: bool = True,
        time_limit_s: float | None = None,
    ) -> CallResult:
        """The same function on every rank of a world of `world_size` processes at once."""
        if len(args_per_rank) != world_size:
            raise ValueError(f"{len(args_per_rank)} argument tuples for {world_size} ranks")
        return self.submission.run(
            self.name,
            [(args, kwargs or {}) for args in args_per_rank],
            distributed=True,
            return_args=return_args,
            return_result=return_result,
            time_limit_s=time_limit_s,
        )


class Library:
    """Trusted worlds that never import a submission: references from the real libraries.

    Targets are "package.module:function" import paths, e.g. "grader.library:all_reduce".
    """

    def __init__(self, device: str = "cpu", time_limit_s: float = 60.0) -> None:
        self.device = device
        self.time_limit_s = time_limit_s
        self._worlds = _Worlds(None, device, 0, ())

    def spmd(
        self,
        target: str,
        world_size: int,
        args_per_rank: Sequence[Sequence[Any]],
        kwargs: dict[str, Any] | None = None,
        *,
        return_result: bool = True,
    ) -> CallResult:
        requests = [
            _request(
                target,
                args,
                kwargs or {},
                target=target,
                forbidden=(),
                return_args=False,
                return_result=return_result,
            )
            for args in args_per_rank
        ]
        world = self._worlds.get(world_size, True)
        return world.call(requests, self.time_limit_s, target)

    def close(self) -> None:
        self._worlds.close()
