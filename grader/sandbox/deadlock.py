"""Finding a deadlock in about a second, from outside the ranks.

NCCL's watchdog declares a collective hung after 10 minutes (TORCH_NCCL_TIMEOUT / the process
group's `timeout`), and torch's flight recorder is read after the fact. The grader can do better,
because it sees every rank of a world from one process:

1. Stillness. While a call runs, the grader polls each rank's I/O counters (bytes read and
   written: gloo moves every byte with read/write calls; where the system does not count them,
   the rank's CPU time stands in, grader/system). A world in which no rank moved a byte for
   STILL_S seconds, and no thread of any rank is running or waiting for a CPU or the disk (a
   busy machine only delays a rank that has work), is suspect; a world that is computing,
   writing or communicating is not.
2. Where. It then asks every rank that has not replied for its Python stack (faulthandler, which
   answers even while the thread waits in C++). If every one of them is inside a communication
   call (a function of torch.distributed, or a `.wait()` on a request), no rank can ever wake the
   others: it is a deadlock. A rank that computes (an infinite loop included) is not blocked, so
   the call goes on under its time limit.
3. Why. Each rank's last line in its communication log (grader/sandbox/commlog.py) says which
   peer it waits for; following "waits for" from rank to rank finds the cycle, if there is one
   (rank 0 waits on a recv from 1, rank 1 on a recv from 0).

On a GPU (NCCL) the bytes a rank moves are not counted, so stillness means nothing there: the
grader looks for deadlocks only in worlds on the CPU (gloo); a GPU world's hang waits for its
time limit.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from grader.sandbox.stacks import waiting_frames

STILL_S = 0.5  # no byte moved on any rank for this long: look at the stacks (the stacks decide)
POLL_S = 0.1  # how often the counters are read while a call runs
_WAIT_CALL = re.compile(r"\.wait\(|\bwait\(")
_PEER = re.compile(r"\b(send|recv|isend|irecv) (?:to|from) rank (\d+)")


def in_communication(stack: str, directory: Path | None) -> bool:
    """Whether a rank's stack dump shows it blocked in a communication call: its innermost
    Python frame is inside torch.distributed, or is a line that waits on a request."""
    frames = waiting_frames(stack, directory)
    if not frames:
        return False
    innermost = frames[0]
    if "/torch/distributed/" in innermost.file.replace("\\", "/"):
        return True
    return bool(_WAIT_CALL.search(innermost.source()))


def waits_for(comm_line: str) -> list[int]:
    """The peers a rank's communication line says it waits for: receives first (a send to a
    peer that is itself blocked has usually left already, a receive cannot finish alone)."""
    peers = _PEER.findall(comm_line)
    return [int(rank) for op, rank in peers if "recv" in op] + [int(rank) for op, rank in peers if "send" in op]


def find_cycle(waiting: dict[int, list[int]]) -> list[int] | None:
    """A cycle of ranks each waiting for the next (and the last for the first), or None."""
    for start in sorted(waiting):
        path, rank = [start], start
        while waiting.get(rank):
            rank = waiting[rank][0]
            if rank in path:
                return path[path.index(rank) :]
            path.append(rank)
    return None


@dataclass
class Deadlock:
    """What the grader saw when it declared a deadlock: per hung rank, its stack and its line."""

    stacks: dict[int, str]
    comm_lines: dict[int, str]
    returned: list[int]  # ranks that had already replied (returned or failed)
    still_s: float

    def cycle(self) -> list[int] | None:
        waiting = {rank: waits_for(line) for rank, line in self.comm_lines.items()}
        return find_cycle(waiting)

    def cycle_text(self) -> str:
        """`rank 0 waits for rank 1, rank 1 waits for rank 0`, or "" without a cycle."""
        cycle = self.cycle()
        if not cycle:
            return ""
        hops = [f"rank {a} waits for rank {b}" for a, b in zip(cycle, [*cycle[1:], cycle[0]])]
        return ", ".join(hops)
