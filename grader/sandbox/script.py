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
class Group:
    """An argument standing for a torch.distributed process group of some ranks of the world,
    given as their global ranks: `Group((1, 3))` in the arguments of ranks 1 and 3 becomes, on
    those two ranks, the same ProcessGroup. Only the members build it (dist.new_group with local
    synchronisation), once per world, so that other ranks may run another group's instance of
    the same test at the same time, or nothing at all."""

    ranks: tuple[int, ...]

    def __post_init__(self) -> None:
        if len(set(self.ranks)) != len(self.ranks) or not self.ranks:
            raise ValueError(f"a group needs distinct ranks, got {self.ranks}")
        object.__setattr__(self, "ranks", tuple(int(r) for r in self.ranks))

    def __repr__(self) -> str:
        return f"group{self.ranks}"


@dataclass(frozen=True)
class Step:
    target: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    save_as: str | None = None  # keep the result in the worker under this name
    send_back: bool = True  # return the result to the grader (False for models, caches, ...)
    measure: tuple[str, ...] = ()  # probes to run around this step (grader/sandbox/probes.py PROBES)

    @property
    def receiver(self) -> str | None:
        """The kept value whose method this step calls, if any ("cache" in "cache.append")."""
        head, dot, _ = self.target.partition(".")
        return head if dot else None


def substitute(value: Any, saved: dict[str, Any], groups: dict[Group, Any] | None = None) -> Any:
    """`value` with every Saved(name) replaced by the kept value and every Group by its process
    group in `groups` (built beforehand by build_groups)."""
    if isinstance(value, Saved):
        if value.name not in saved:
            raise KeyError(f"no value was saved as {value.name!r}")
        return saved[value.name]
    if isinstance(value, Group) and groups is not None:
        return groups[value]
    if isinstance(value, (list, tuple)) and type(value) in (list, tuple):
        return type(value)(substitute(item, saved, groups) for item in value)
    if isinstance(value, dict):
        return {k: substitute(v, saved, groups) for k, v in value.items()}
    return value


def groups_in(value: Any) -> list[Group]:
    """Every Group marker inside `value`, in order of appearance."""
    if isinstance(value, Group):
        return [value]
    if isinstance(value, (list, tuple)) and type(value) in (list, tuple):
        return [g for item in value for g in groups_in(item)]
    if isinstance(value, dict):
        return [g for item in value.values() for g in groups_in(item)]
    return []


def build_groups(steps: list[dict[str, Any]], groups: dict[Group, Any]) -> None:
    """Create, on this rank, the process groups its steps name and `groups` does not hold yet.
    Only members create a group (use_local_synchronization), so ranks outside it need not call."""
    import torch.distributed as dist

    rank = dist.get_rank()
    for group in groups_in([(step["args"], step["kwargs"]) for step in steps]):
        if group in groups:
            continue
        if rank not in group.ranks:
            raise ValueError(f"rank {rank} was handed {group!r}, a group it is not a member of")
        groups[group] = dist.new_group(list(group.ranks), use_local_synchronization=True)
