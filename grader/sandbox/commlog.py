"""What a rank is waiting for, written where the grader can read it while the rank is blocked.

A blocked rank cannot answer questions: its main thread sits in gloo's (or NCCL's) C++ wait. So
every torch.distributed call a submission makes is wrapped, before its files are imported, to
write one line into a small shared-memory file (mmap, so the writes are not counted as bytes
sent) saying what it waits for:

    waits in recv from rank 1 (tag 0)
    waits in wait() on isend to rank 2 (tag 0)
    waits on its requests: irecv from rank 3 (tag 0), isend to rank 1 (tag 0)

The grader (grader/sandbox/deadlock.py) reads it only once it has seen every live rank still,
inside a communication call, for about a second. The line is diagnosis, never a verdict: a
submission that scribbles over it changes what its own deadlock report says, nothing else.
"""

from __future__ import annotations

import functools
import mmap
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

SIZE = 4096
MAX_POSTED = 16  # unfinished async requests remembered per rank
MAX_SHOWN = 4

# name -> (keyword of its peer, position of the peer, keyword of the group-relative peer)
POINT_TO_POINT = {
    "send": ("dst", 1, "group_dst"),
    "recv": ("src", 1, "group_src"),
    "isend": ("dst", 1, "group_dst"),
    "irecv": ("src", 1, "group_src"),
}
COLLECTIVES = (
    "all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_object", "reduce_scatter",
    "reduce_scatter_tensor", "reduce", "broadcast", "broadcast_object_list", "all_to_all",
    "all_to_all_single", "scatter", "gather", "barrier", "monitored_barrier", "all_gather_single",
    "reduce_scatter_single", "_all_gather_base", "_reduce_scatter_base", "all_gather_coalesced",
    "all_reduce_coalesced",
)  # fmt: skip


class CommLog:
    """One rank's line: its blocking call (if any), then the async requests not yet finished."""

    def __init__(self, path: Path) -> None:
        with open(path, "wb") as file:
            file.write(b"\0" * SIZE)
        fd = os.open(path, os.O_RDWR)
        try:
            self._map = mmap.mmap(fd, SIZE)
        finally:
            os.close(fd)
        self._blocking: list[str] = []
        self._posted: list[tuple[str, Any]] = []
        self._step = 0

    def at_step(self, index: int) -> None:
        """The worker starts step `index` of its script (named in a hang's report)."""
        self._step = index
        self._write()

    def _write(self) -> None:
        self._posted = [(text, work) for text, work in self._posted if not _finished(work)][-MAX_POSTED:]
        if self._blocking:  # the call it is in is what it waits for (earlier requests may be done)
            line = f"waits in {self._blocking[-1]}"
        elif self._posted:  # between calls, or in a request's wait(): what it has not seen finish
            shown = [text for text, _ in self._posted[-MAX_SHOWN:]]
            more = len(self._posted) - len(shown)
            line = "waits on its requests: " + ", ".join(shown) + (f" and {more} more" if more else "")
        else:
            line = ""
        data = f"step {self._step}: {line}".encode()[: SIZE - 1] + b"\0"
        self._map[: len(data)] = data

    def wrap(self, name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        def logged(*args: Any, **kwargs: Any) -> Any:
            if self._blocking:  # torch calling itself (recv is irecv(...).wait()): logged already
                return original(*args, **kwargs)
            what = describe(name, args, kwargs)
            self._blocking.append(what)
            self._write()
            try:
                result = original(*args, **kwargs)
            finally:
                self._blocking.pop()
            if isinstance(result, dist.Work):
                self._posted.append((what, result))
            self._write()
            return result

        del logged.__wrapped__
        return logged

    def wrap_wait(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """Work.wait, saying which request it waits on (as its call was logged)."""

        @functools.wraps(original)
        def wait(work: Any, *args: Any, **kwargs: Any) -> Any:
            if self._blocking:
                return original(work, *args, **kwargs)
            what = next((text for text, posted in self._posted if posted is work), "a request")
            self._blocking.append(f"wait() on {what}")
            self._write()
            try:
                return original(work, *args, **kwargs)
            finally:
                self._blocking.pop()
                self._write()

        del wait.__wrapped__
        return wait

    def install(self) -> None:
        """Wrap every communication call of torch.distributed (both names of each), and the
        wait() of the requests the async ones return."""
        for name in (*POINT_TO_POINT, *COLLECTIVES):
            original = getattr(c10d, name, None)
            if original is None:
                continue
            wrapper = self.wrap(name, original)
            setattr(c10d, name, wrapper)
            if getattr(dist, name, None) is original:
                setattr(dist, name, wrapper)
        dist.Work.wait = self.wrap_wait(dist.Work.wait)


def _finished(work: Any) -> bool:
    try:
        return bool(work.is_completed())
    except RuntimeError:  # a request that failed is finished too
        return True


def _argument(args: tuple, kwargs: dict[str, Any], keyword: str, position: int) -> Any:
    if keyword in kwargs:
        return kwargs[keyword]
    return args[position] if len(args) > position else None


def describe(name: str, args: tuple, kwargs: dict[str, Any]) -> str:
    """`recv from rank 1 (tag 0)`, `all_reduce in a group of 4`: peers as global ranks."""
    group = kwargs.get("group") or next((a for a in args if isinstance(a, dist.ProcessGroup)), None)
    if name not in POINT_TO_POINT:
        try:
            size = dist.get_world_size(group)
        except (RuntimeError, ValueError):
            return name
        return f"{name} in a group of {size}"
    keyword, position, group_keyword = POINT_TO_POINT[name]
    peer = _argument(args, kwargs, keyword, position)
    if peer is None and kwargs.get(group_keyword) is not None:
        try:
            peer = dist.get_global_rank(group or dist.group.WORLD, kwargs[group_keyword])
        except (RuntimeError, ValueError):
            peer = None
    direction = "to" if "send" in name else "from"
    tag = kwargs.get("tag", args[3] if len(args) > 3 else 0)
    return f"{name} {direction} rank {peer} (tag {tag})" if peer is not None else f"{name} (any source)"


def read(path: Path) -> tuple[int | None, str]:
    """The step a rank was in and the line it last wrote ((None, "") when there is none)."""
    try:
        text = path.read_bytes().split(b"\0", 1)[0].decode(errors="replace")
    except OSError:
        return None, ""
    step, colon, line = text.partition(": ")
    if not colon or not step.startswith("step ") or not step[5:].isdigit():
        return None, ""
    return int(step[5:]), line
