"""Remote objects: a notebook calls the student's code as if it were local, and it runs in a worker.

    serving = open_module("serving")                # grader/notebook.py
    model = serving.build_model(CONFIG, 0, "float32")
    sched = serving.Scheduler(model, 24, 4, 16)     # built in the worker; `sched` stands for it
    sched.add_request("a", prompt, 8)
    batch = sched.step()                            # tensors, numbers, lists... come back
    sched.cache.num_free_blocks()                   # attributes and methods, as deep as you like

Every call is one step of a script run by the module's single-process worker, which keeps what
the session built between calls (Submission.run(keep=True)). A result that is plain data (what a
worker may send back, grader/sandbox/protocol.py) is returned; anything else (a model, a cache,
a bound method) stays in the worker and comes back as a RemoteObject naming it. RemoteObjects may
be passed as arguments to later calls. If the worker is replaced (after a crash or a hang), the
objects it held are gone: using one says so, and the cell that built it must run again.
"""

from __future__ import annotations

import itertools
from typing import Any

from grader.sandbox.protocol import REMOTE
from grader.sandbox.script import Saved, Step


class RemoteSession:
    """The objects one notebook built in one worker of a submission."""

    def __init__(self, submission: Any) -> None:
        self.submission = submission
        self._names = itertools.count()
        self._world: object | None = None

    def call(self, target: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Run `target(*args, **kwargs)` in the worker: its plain result, or a RemoteObject."""
        name = f"kept{next(self._names)}"
        step = Step(target, _as_saved(args), _as_saved(kwargs), save_as=name, send_back="auto")
        result = self.submission.run([[step]], distributed=False, keep=True).output
        self._world = self.submission.single_process_world()
        if isinstance(result, dict) and REMOTE in result:
            return RemoteObject(self, result[REMOTE], result["type"], self._world)
        return result


class RemoteObject:
    """A value kept in the worker; attribute access and calls run there."""

    def __init__(self, session: RemoteSession, name: str, kind: str, world: object | None) -> None:
        object.__setattr__(self, "_session", session)
        object.__setattr__(self, "_name", name)
        object.__setattr__(self, "_kind", kind)
        object.__setattr__(self, "_world", world)

    def _target(self, attribute: str) -> str:
        if self._session.submission.single_process_world() is not self._world:
            raise RuntimeError(
                f"this {self._kind} lived in a worker that has since been replaced (after a failed call): "
                f"run the cell that built it again"
            )
        return f"{self._name}.{attribute}"

    def __getattr__(self, attribute: str) -> Any:
        if attribute.startswith("__"):
            raise AttributeError(attribute)
        return self._session.call(self._target("__getattribute__"), (attribute,), {})

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._session.call(self._target("__call__"), args, kwargs)

    def __setattr__(self, attribute: str, value: Any) -> None:
        self._session.call(self._target("__setattr__"), (attribute, value), {})

    def __repr__(self) -> str:
        return f"<{self._kind} in the worker>"


def _as_saved(value: Any) -> Any:
    """`value` with every RemoteObject replaced by the Saved name the worker knows it by."""
    if isinstance(value, RemoteObject):
        value._target("")  # refuses an object from a worker that is gone
        return Saved(value._name)
    if isinstance(value, (list, tuple)) and type(value) in (list, tuple):
        return type(value)(_as_saved(item) for item in value)
    if isinstance(value, dict):
        return {k: _as_saved(v) for k, v in value.items()}
    return value
