"""Refusing library calls that would bypass an exercise (runs inside the worker).

Wrappers are installed over every forbidden name before the student's code is imported, so
`from torch.distributed import all_reduce` in a submission binds the wrapper too. A wrapper is
inert until a call activates its name; then it raises ForbiddenCallError and records the attempt,
so a submission that catches the error still fails.

A wrapper keeps no `__wrapped__` (functools.wraps would leave the original one attribute away),
and `tampered()` names any wrapped function that the submission has since put back or replaced.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any


class ForbiddenCallError(RuntimeError):
    """Raised inside the student's function when it calls a refused library function."""


def _resolve_owner(dotted: str) -> tuple[Any, str] | None:
    """The object holding the last attribute of `dotted`, and that attribute's name."""
    parts = dotted.split(".")
    for split in range(len(parts) - 1, 0, -1):
        try:
            owner: Any = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        try:
            for attr in parts[split:-1]:
                owner = getattr(owner, attr)
        except AttributeError:
            return None
        return (owner, parts[-1]) if hasattr(owner, parts[-1]) else None
    return None


class Guard:
    """Wraps forbidden functions; `refusing(names, function)` arms them for one call."""

    def __init__(self, names: Iterable[str]) -> None:
        self._armed: frozenset[str] = frozenset()
        self._function = ""
        self.attempts: list[str] = []
        self._installed: list[tuple[str, Any, str, Callable[..., Any]]] = []
        for name in sorted(set(names)):
            found = _resolve_owner(name)
            if found is not None:
                owner, attr = found
                wrapper = self._wrap(name, getattr(owner, attr))
                setattr(owner, attr, wrapper)
                self._installed.append((name, owner, attr, wrapper))

    def tampered(self) -> list[str]:
        """Forbidden names that no longer resolve to their wrapper (put back or replaced)."""
        return [name for name, owner, attr, wrapper in self._installed if owner.__dict__.get(attr) is not wrapper]

    def _wrap(self, name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        def refused_when_armed(*args: Any, **kwargs: Any) -> Any:
            if name in self._armed:
                self.attempts.append(name)
                raise ForbiddenCallError(f"{self._function} may not call {name}: the exercise is to build it yourself")
            return original(*args, **kwargs)

        del refused_when_armed.__wrapped__
        return refused_when_armed

    @contextmanager
    def refusing(self, names: Iterable[str], function: str) -> Iterator[None]:
        self._armed, self._function, self.attempts = frozenset(names), function, []
        try:
            yield
        finally:
            self._armed = frozenset()
