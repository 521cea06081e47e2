"""Scripts: several calls into a submission in one round trip, keeping objects between them.

Stateful exercises (a cache object, a model, an optimizer wrapper) need more than one call on
the same object. A script is a list of steps run in order in the worker; a step's result can be
kept there under a name and used by later steps:

    steps = [
        Step("PagedKVCache", (8, 4, 1, 2, 16), save_as="cache"),
        Step("cache.add_sequence", (0,)),
        Step("cache.append", (0, 0, k, v)),
        Step("cache.gather", (0, 0)),
        Step("generate", (Saved("model"), prompt), measure=("flops",)),
    ]

A target is a function or class of the module (resolved through course.toml) or
"name.method" on a kept value. `measure` names probes (grader/sandbox/probes.py) that run
around that step; their numbers come back beside the results. Everything here is plain data.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Saved:
    """An argument standing for a value an earlier step kept in the worker."""

    name: str


@dataclass(frozen=True)
class Step:
    target: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    save_as: str | None = None  # keep the result in the worker under this name
    send_back: bool = True  # return the result to the grader (False for models, caches, ...)
    measure: tuple[str, ...] = ()  # probes to run around this step: "flops", "ops", "largest"

    @property
    def receiver(self) -> str | None:
        """The kept value whose method this step calls, if any ("cache" in "cache.append")."""
        head, dot, _ = self.target.partition(".")
        return head if dot else None


def substitute(value: Any, saved: dict[str, Any]) -> Any:
    """`value` with every Saved(name) replaced by the kept value."""
    if isinstance(value, Saved):
        if value.name not in saved:
            raise KeyError(f"no value was saved as {value.name!r}")
        return saved[value.name]
    if isinstance(value, (list, tuple)) and type(value) in (list, tuple):
        return type(value)(substitute(item, saved) for item in value)
    if isinstance(value, dict):
        return {k: substitute(v, saved) for k, v in value.items()}
    return value
