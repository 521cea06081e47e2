"""The proxies tests call: a submission's functions, and the trusted library reference.

    ring_allreduce = submission.function("ring_allreduce")
    result = ring_allreduce.spmd(world_size=4, args_per_rank=[(t,) for t in tensors])
    reference = library.spmd("grader.library:all_reduce", 4, [(t,) for t in tensors])
    result = submission.script([Step("PagedKVCache", (...), save_as="cache"), Step("cache.gather", (0, 0))])

Every call is a script of steps (grader/sandbox/script.py); a plain call is a script of one.
Worlds are pooled by size, so process start-up is paid once per module and world size; a world
that hung or crashed is replaced by a fresh one on the next call.

Before the first call the grader reads the submission's files (never runs them) and refuses a
module whose code imports the grader or pytest, or reaches for a function's `__wrapped__` or
`__closure__`: the ways into the grader's own checks. Workers of a submission cannot read the
hidden suites or the reference solutions (grader/sandbox/landlock.py).
"""

from __future__ import annotations

import ast
import hashlib
import io
import os
import pickle
import re
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from grader.course import COURSE_ROOT, Function, Module
from grader.sandbox.errors import SubmissionError
from grader.sandbox.given import given_code, given_names
from grader.sandbox.limits import ReferenceLimit
from grader.sandbox.pool import CallResult, World
from grader.sandbox.script import Step
from grader.sandbox.stubs import stub_message


def _shown(path: Path) -> str:
    try:
        return os.path.relpath(path)
    except ValueError:
        return str(path)


class _Worlds:
    """Worlds kept alive between calls, keyed by (size, distributed)."""

    def __init__(
        self,
        submission: Path | None,
        device: str,
        memory_mb: int,
        forbidden: tuple[str, ...],
        hidden: tuple[Path, ...] = (),
    ):
        self._options = dict(
            submission=submission, device=device, memory_mb=memory_mb, forbidden=forbidden, hidden=hidden
        )
        self._worlds: dict[tuple[int, bool], World] = {}
        self._shut = False
        self._starting = threading.Lock()  # the reference's worlds are started from a thread

    def get(self, size: int, distributed: bool) -> World:
        with self._starting:
            if self._shut:
                raise SubmissionError("start", "", "the grading has ended: no world is started")
            world = self._worlds.get((size, distributed))
            if world is None or not world.alive:
                world = World(size, distributed=distributed, **self._options)
                self._worlds[(size, distributed)] = world
            return world

    def current(self, size: int, distributed: bool) -> World | None:
        world = self._worlds.get((size, distributed))
        return world if world is not None and world.alive else None

    def close(self) -> None:
        for world in self._worlds.values():
            world.close()
        self._worlds.clear()

    def shut(self) -> None:
        """Close every world for good: a world being started now is closed once it has started,
        and none is started after (a reference run still under way in its thread then fails)."""
        with self._starting:
            self._shut = True
            self.close()


# What a submission has no business importing or touching: the grader's own code and checks
# (the models the course gives students, grader.models, excepted).
FORBIDDEN_IMPORTS = ("grader", "pytest", "_pytest")
ALLOWED_IMPORTS = ("grader.models",)
FORBIDDEN_ATTRIBUTES = ("__wrapped__", "__closure__")


def _forbidden_import(name: str) -> bool:
    allowed = any(name == a or name.startswith(f"{a}.") for a in ALLOWED_IMPORTS)
    return name.split(".")[0] in FORBIDDEN_IMPORTS and not allowed


def hidden_folders(submission: Path) -> tuple[Path, ...]:
    """What a submission's workers may not read: the hidden suites, and the reference solutions
    unless they are what is being graded."""
    folders = [COURSE_ROOT / "grader" / "suites"]
    solutions = COURSE_ROOT / "solutions"
    if not submission.resolve().is_relative_to(solutions.resolve()):
        folders.append(solutions)
    return tuple(f for f in folders if f.is_dir())


def reaches_into_the_grader(directory: Path, files: Sequence[str]) -> str | None:
    """Why the submission's code is refused before it runs (its first offence), or None."""
    for file in files:
        try:
            tree = ast.parse((directory / file).read_text(), filename=file)
        except (OSError, SyntaxError, ValueError):
            continue  # a missing or broken file is reported when it is imported
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [f"{node.module}.{alias.name}" for alias in node.names]
            elif isinstance(node, ast.Attribute) and node.attr in FORBIDDEN_ATTRIBUTES:
                return (
                    f"{file} uses {node.attr} (line {node.lineno}): reaching past a wrapper to the "
                    f"function it guards is a way around the exercise, and the grader refuses it"
                )
            else:
                continue
            for name in names:
                if _forbidden_import(name):
                    return (
                        f"{file} imports {name} (line {node.lineno}): a submission may not use the "
                        f"grader's or pytest's code; remove that import"
                    )
    return None


def _step_message(
    step: Step, spec: Function | None, target: str, given: dict[str, str] | None = None
) -> dict[str, Any]:
    return {
        "target": step.target,
        "file": spec.file if spec else None,
        "given": given or {},  # the course's given code of every file, run over the student's copies
        "args": tuple(step.args),
        "kwargs": dict(step.kwargs),
        "save_as": step.save_as,
        "send_back": step.send_back,
        "measure": tuple(step.measure),
        "forbidden": spec.forbidden if spec else (),
        "shown_as": target,
    }


# Failures that happen after staging, so every file of the call had been imported.
IMPORTED_BEFORE_FAILING = ("not_implemented", "exception", "bad_return", "thread")
JIT_ALLOWANCE_S = 60.0  # seconds added to each call's limit on a GPU: compiling a kernel takes seconds


def _remembered_as(step: dict[str, Any], module: Module) -> str:
    """The name a hang or crash is remembered under. A given helper that runs a course function
    named by its first argument (forward_backward("flash_attention_triton", ...)) is remembered
    per function, so one function's hang does not stop the tests of the others it runs."""
    args = step["args"]
    if args and isinstance(args[0], str) and args[0] in module.functions:
        return f"{step['shown_as']}({args[0]})"
    return step["shown_as"]


_LAST_CALL = [""]


def last_call() -> str:
    """`expert_capacity(10, 4, 2, -1.0)`: the last call made into a submission in this process."""
    return _LAST_CALL[0]


class _ByContent(pickle.Pickler):
    """Pickles a tensor as its dtype, shape and values. torch's own pickle names the storage by
    its address, so two equal arguments would fingerprint differently, or, when an address is
    reused, two different calls alike."""

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, torch.Tensor):
            content = obj.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes()
            return tuple, ((str(obj.dtype), tuple(obj.shape), obj.requires_grad, content),)
        return NotImplemented


def _digest(resolved: list[list[dict[str, Any]]]) -> str:
    """A fingerprint of a call: every rank's steps with their arguments (by value) and what the
    grader measures in them (a probe wraps the calls it counts, so a measured call is another run)."""
    calls = [[(s["target"], s["args"], s["kwargs"], s["save_as"], s["measure"]) for s in steps] for steps in resolved]
    buffer = io.BytesIO()
    _ByContent(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(calls)
    return hashlib.sha1(buffer.getvalue()).hexdigest()


def describe_arguments(args: Sequence[Any], kwargs: dict[str, Any], limit: int = 160) -> str:
    """`(float32[4, 8], 2, causal=True)`: a call's arguments, tensors by dtype and shape."""

    def shown(value: Any) -> str:
        if isinstance(value, torch.Tensor):
            return f"{str(value.dtype).removeprefix('torch.')}{list(value.shape)}"
        if isinstance(value, (list, tuple)) and len(value) > 4:
            return f"{type(value).__name__} of {len(value)}"
        if isinstance(value, (list, tuple)):
            inner = ", ".join(shown(v) for v in value)
            return f"[{inner}]" if isinstance(value, list) else f"({inner})"
        text = repr(value)
        return text if len(text) <= 40 else text[:37] + "..."

    text = ", ".join([*(shown(a) for a in args), *(f"{k}={shown(v)}" for k, v in kwargs.items())])
    return f"({text if len(text) <= limit else text[: limit - 3] + '...'})"


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
        reference: Path | None = None,
    ) -> None:
        self.module = module
        self.directory = directory.resolve()
        self.device = device
        self.echo = echo
        self.time_limit_s = time_limit_s if time_limit_s is not None else module.time_limit_s
        if device == "cuda":  # a first call on a GPU also compiles the Triton kernels it launches
            self.time_limit_s += JIT_ALLOWANCE_S
        forbidden = tuple(sorted({n for f in module.functions.values() for n in f.forbidden}))
        hidden = hidden_folders(self.directory)
        self._worlds = _Worlds(self.directory, device, module.memory_limit_mb, forbidden, hidden)
        # The reference solution, run on a call that takes long to set its limit (limits.py):
        # by default the course's solutions/<module>, unless a limit was chosen by hand.
        if reference is None and time_limit_s is None:
            reference = COURSE_ROOT / "solutions" / module.name
        self._reference_busy = threading.Lock()  # one reference call at a time (it runs in a thread)
        graded_is_reference = reference is not None and reference.resolve() == self.directory
        self._reference = (
            _Worlds(reference.resolve(), device, module.memory_limit_mb, (), ())
            if reference is not None and reference.is_dir() and not graded_is_reference
            else None
        )
        self._refusal: str | None = None  # why the code is refused, once the files were read
        # Why a call is not run again. A deadlock, a crash or a call past a limit that followed
        # the reference (seconds: grader/sandbox/limits.py) costs only its own case: the very
        # same call (function, world size, arguments) is not run again, any other call gets a
        # fresh world. A call past the ceiling alone (no reference at hand) is not retried at
        # that world size, which keeps the grading time of an infinite loop bounded by
        # (functions x world sizes) time limits.
        self._broken: dict[tuple[str, int, str], SubmissionError] = {}
        self.case = ""  # the test now running (set by the pytest plugin), named in failures
        self._imported: set[str] = set()  # files a worker has imported without error
        self._session: dict[str, str] = {}  # names a session's worker keeps -> the function that made them
        self._given: dict[str, str] | None = None

    def function(self, name: str) -> RemoteFunction:
        self.module.function(name)  # an unknown name is the test's mistake: fail now
        return RemoteFunction(self, name)

    def still_the_stub(self, name: str) -> bool:
        """Whether the module-level function or class `name` is certainly still the stub, read
        from its source without running anything (grader/sandbox/stubs.py; False when unsure).
        A suite that prepares costly inputs first calls a stub with cheap ones, so that it
        reports "not implemented" at once."""
        file = self.module.function(name).file
        return stub_message(self.directory / file, name, given_names(self.module.name, file)) is not None

    def script(self, steps: list[Step], *, return_args: bool = False, time_limit_s: float | None = None) -> CallResult:
        """Run `steps` in order in one worker; result.steps[0] holds each step's result."""
        return self.run([steps], distributed=False, return_args=return_args, time_limit_s=time_limit_s)

    def script_spmd(
        self,
        world_size: int,
        steps_per_rank: Sequence[list[Step]],
        *,
        return_args: bool = False,
        time_limit_s: float | None = None,
    ) -> CallResult:
        """Run each rank's steps on a world of `world_size` processes at once."""
        if len(steps_per_rank) != world_size:
            raise ValueError(f"{len(steps_per_rank)} scripts for {world_size} ranks")
        return self.run(steps_per_rank, distributed=True, return_args=return_args, time_limit_s=time_limit_s)

    def _resolve(self, steps: list[Step], kept: dict[str, str] | None = None) -> list[dict[str, Any]]:
        """Each step with its file and refused calls; a method inherits them from its class.
        `kept`: saved name -> the function or class that made it (a session's, across calls)."""
        kept = {} if kept is None else kept
        messages = []
        for step in steps:
            receiver = step.receiver
            if receiver is not None and receiver in kept:
                owner = kept[receiver]
                spec, shown = self.module.function(owner), f"{owner}.{step.target.partition('.')[2]}"
            else:
                spec, shown = self.module.function(step.target), step.target
            if step.save_as:
                kept[step.save_as] = spec.name
            messages.append(_step_message(step, spec, shown, self._given_code()))
        return messages

    def _given_code(self) -> dict[str, str]:
        """The course's given code of each of the module's files that has some."""
        if self._given is None:
            found = {file: given_code(self.module.name, file) for file in self.module.files}
            self._given = {file: code for file, code in found.items() if code}
        return self._given

    def run(
        self,
        steps_per_rank: Sequence[list[Step]],
        *,
        distributed: bool,
        return_args: bool = False,
        time_limit_s: float | None = None,
        keep: bool = False,
    ) -> CallResult:
        """Run a script on every rank. With `keep` (a notebook's session, grader/sandbox/remote.py)
        the worker keeps what the steps saved for the calls after this one."""
        if not self.directory.is_dir():
            name = steps_per_rank[0][0].target
            raise SubmissionError("import", name, f"the submission has no folder {_shown(self.directory)}")
        resolved = [self._resolve(steps, self._session if keep else None) for steps in steps_per_rank]
        first = _remembered_as(resolved[0][0], self.module)
        last = resolved[0][-1]
        _LAST_CALL[0] = f"{last['shown_as']}{describe_arguments(last['args'], last['kwargs'], limit=400)}"
        if len(resolved) > 1:
            _LAST_CALL[0] += f" on each of {len(resolved)} ranks"
        if self._refusal is None:
            self._refusal = reaches_into_the_grader(self.directory, self.module.files) or ""
        if self._refusal:
            raise SubmissionError("forbidden", resolved[0][0]["shown_as"], self._refusal)
        digest = _digest(resolved)
        for key in ((first, len(resolved), digest), (first, len(resolved), "")):
            if key in self._broken:
                raise self._broken[key]
        if (stub := self._known_stub(resolved[0][0])) is not None:
            raise self._explain(SubmissionError("not_implemented", first, stub), resolved[0])
        requests = [{"op": "call", "steps": steps, "return_args": return_args, "keep": keep} for steps in resolved]
        world = self._worlds.get(len(requests), distributed)
        limit = time_limit_s if time_limit_s is not None else self.time_limit_s
        files = {step["file"] for step in resolved[0] if step["file"]}
        following = None
        if self._reference is not None and time_limit_s is None:
            following = ReferenceLimit(limit, lambda: self._reference_seconds(requests, distributed, limit))
        try:
            result = world.call(requests, limit, first, reference_limit=following)
        except SubmissionError as error:
            if error.kind in IMPORTED_BEFORE_FAILING:
                self._imported |= files
            if error.kind in ("timeout", "deadlock", "crash"):
                # A timeout under the ceiling alone (no reference at hand) is remembered for the
                # whole function at this world size: each of its calls would cost the ceiling.
                per_call = error.kind != "timeout" or following is not None
                self._remember(error, first, len(requests), digest if per_call else "", distributed)
                error = error.reworded(error.message + self._case_line(resolved, error.step))
            if self.echo:
                self._echo(error.printed)
            raise self._explain(error, resolved[0]) from None
        self._imported |= files
        if self.echo:
            self._echo(result.printed)
        return result

    def _reference_seconds(self, requests: list[dict[str, Any]], distributed: bool, limit: float) -> float | None:
        """The reference's time on the very same call (None if the reference's workers are still
        busy with an earlier call; a run that fails raises, which ReferenceLimit takes as no
        measurement: the ceiling stays)."""
        assert self._reference is not None
        if not self._reference_busy.acquire(blocking=False):
            return None
        try:
            return self._reference.get(len(requests), distributed).call(requests, limit, "the reference").seconds
        finally:
            self._reference_busy.release()

    def _remember(self, error: SubmissionError, first: str, size: int, digest: str, distributed: bool) -> None:
        """Refuse to run this call again (every call of `first` at this size if `digest` is "")."""
        verb = {"timeout": "ran past its time limit", "deadlock": "deadlocked", "crash": "crashed"}[error.kind]
        where = f" at world size {size}" if distributed else ""
        in_test = f" in {self.case}" if self.case else " earlier in this run"
        if digest:
            message = f"not run: the same call ({first}{where}, the same arguments) {verb}{in_test}"
            message += "; see that test's report"
        else:
            message = f"not run: {first} {verb}{where}{in_test} (see that test's report)"
            message += "; fix that and it is graded again"
        self._broken[(first, size, digest)] = SubmissionError(error.kind, first, message)

    def _case_line(self, resolved: list[list[dict[str, Any]]], failed: int | None) -> str:
        """`the case: world size 4, ring_allreduce(float32[1000]) in test_x[4]`: what to replay."""
        steps = resolved[0]
        step = steps[failed] if failed is not None and 0 <= failed < len(steps) else steps[-1]
        text = f"{step['shown_as']}{describe_arguments(step['args'], step['kwargs'])}"
        if len(resolved) > 1:
            text = f"world size {len(resolved)}, {text}"
        return f"\nthe case: {text}" + (f" in {self.case}" if self.case else "")

    def _known_stub(self, step: dict[str, Any]) -> str | None:
        """The stub's message when the step's function is certainly still the stub (its file
        was imported by a worker before): answered without a worker (grader/sandbox/stubs.py)."""
        file = step["file"]
        if file not in self._imported or "." in step["target"]:
            return None
        return stub_message(self.directory / file, step["target"], given_names(self.module.name, file))

    def _explain(self, error: SubmissionError, steps: list[dict[str, Any]]) -> SubmissionError:
        """Name the step that failed, and turn not-implemented into the instruction to follow."""
        step = steps[error.step] if error.step is not None and error.step < len(steps) else steps[0]
        shown = step["shown_as"]
        if error.kind != "not_implemented":
            if len(steps) > 1 and error.step is not None:
                message = f"in step {error.step + 1} of {len(steps)} ({shown}): {error.message}"
                return error.reworded(message, shown)
            return error
        # The stub's own message names the function that is missing, which may be one the
        # called function uses ("implement dispatch (...)" raised inside MoELayer.forward).
        named = re.search(r"implement ([\w.]+) \(", error.message)
        if named and named.group(1).split(".")[0] in self.module.functions:
            shown = named.group(1)
        owner = shown.split(".")[0]
        spec = self.module.functions.get(owner) or self.module.function(steps[0]["shown_as"].split(".")[0])
        message = (
            f"{shown} is not implemented yet: implement it in {_shown(self.directory / spec.file)} "
            f"(see {self.module.lecture}, section {spec.section})"
        )
        return SubmissionError("not_implemented", shown, message)

    def _echo(self, printed: list[str]) -> None:
        for rank, text in enumerate(printed):
            for line in text.splitlines():
                prefix = f"[rank {rank}] " if len(printed) > 1 else ""
                sys.stdout.write(f"{prefix}{line}\n")

    def single_process_world(self) -> World | None:
        """The live worker that single-process calls (and a notebook's session) run in."""
        return self._worlds.current(1, False)

    def restart(self) -> None:
        """Fresh workers (which import the files again) and a clean slate for hung functions."""
        self._worlds.close()
        self._session.clear()
        self._broken.clear()
        self._imported.clear()
        self._refusal = None

    def close(self) -> None:
        self._worlds.close()
        if self._reference is not None:
            self._reference.shut()  # a reference run that outlived its call stops here


class RemoteFunction:
    """A student's function (or class), callable from tests as if it were local."""

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
        measure: tuple[str, ...] = (),
        time_limit_s: float | None = None,
    ) -> CallResult:
        """One call in a single worker process (no process group)."""
        step = Step(self.name, tuple(args), kwargs or {}, send_back=return_result, measure=measure)
        return self.submission.run([[step]], distributed=False, return_args=return_args, time_limit_s=time_limit_s)

    def spmd(
        self,
        world_size: int,
        args_per_rank: Sequence[Sequence[Any]],
        kwargs: dict[str, Any] | None = None,
        *,
        return_args: bool = False,
        return_result: bool = True,
        measure: tuple[str, ...] = (),
        time_limit_s: float | None = None,
    ) -> CallResult:
        """The same function on every rank of a world of `world_size` processes at once."""
        if len(args_per_rank) != world_size:
            raise ValueError(f"{len(args_per_rank)} argument tuples for {world_size} ranks")
        steps = [
            [Step(self.name, tuple(args), kwargs or {}, send_back=return_result, measure=measure)]
            for args in args_per_rank
        ]
        return self.submission.run(steps, distributed=True, return_args=return_args, time_limit_s=time_limit_s)


class Library:
    """Trusted workers that never import a submission: references from the real libraries.

    Targets are "package.module:function" import paths, e.g. "grader.library:all_reduce", or a
    reference written in a hidden suite ("grader.suites.moe.reference:forward"). `run` uses one
    worker without a process group (to time a reference the same way a submission is timed);
    `spmd` a world of ranks.
    """

    def __init__(self, device: str = "cpu", time_limit_s: float = 60.0) -> None:
        self.device = device
        self.time_limit_s = time_limit_s
        self._worlds = _Worlds(None, device, 0, ())

    def run(
        self,
        target: str,
        args: Sequence[Any] = (),
        kwargs: dict[str, Any] | None = None,
        *,
        return_result: bool = True,
        measure: tuple[str, ...] = (),
    ) -> CallResult:
        step = Step(target, tuple(args), kwargs or {}, send_back=return_result, measure=measure)
        request = {"op": "call", "steps": [_step_message(step, None, target)], "return_args": False}
        return self._worlds.get(1, False).call([request], self.time_limit_s, target)

    def spmd(
        self,
        target: str,
        world_size: int,
        args_per_rank: Sequence[Sequence[Any]],
        kwargs: dict[str, Any] | None = None,
        *,
        return_result: bool = True,
    ) -> CallResult:
        steps = [Step(target, tuple(args), kwargs or {}, send_back=return_result) for args in args_per_rank]
        requests = [{"op": "call", "steps": [_step_message(s, None, target)], "return_args": False} for s in steps]
        return self._worlds.get(world_size, True).call(requests, self.time_limit_s, target)

    def close(self) -> None:
        self._worlds.close()
