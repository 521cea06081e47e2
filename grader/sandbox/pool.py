"""Worker processes and worlds of ranks, seen from the grader's side.

A World is N worker processes joined by torch.distributed (a world of one needs no process
group). It runs one call at a time on every rank, under a time limit, and measures from outside:
wall time from GO to the last reply, and the bytes each rank wrote (the kernel's count of the
write/writev family, grader/system: gloo's TCP transport uses it, a raw socket.send would not be
counted), less what the rank printed and its reply to the grader. Where the system keeps no such
count (macOS), a check that reads the bytes gives no verdict and no points, and says why.
When a call hangs or a rank dies, the stack of every rank is taken with faulthandler before the
world is killed; the next call starts a fresh world. A world of ranks in which every rank still
running is blocked in communication, with no byte moving, is a deadlock: it is stopped after
about a second (grader/sandbox/deadlock.py), long before the time limit, which stays for loops
that compute forever.

Nothing a world starts outlives it: workers run in a temporary folder of their own (their working
folder, removed with the world), each in a session of its own (killed as a process group), and
every process whose environment carries the world's marker is killed too, which catches children
that left the session. A worker may write at most FILE_SIZE_LIMIT_MB to any one file, its output
included, and the grader reads at most OUTPUT_READ_LIMIT bytes of what it printed per call.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

from grader import system
from grader.perf import NotCountedHere
from grader.sandbox.commlog import read as read_comm_line
from grader.sandbox.deadlock import POLL_S, STILL_S, Deadlock, in_communication
from grader.sandbox.errors import SubmissionError
from grader.sandbox.limits import ReferenceLimit
from grader.sandbox.protocol import GO, decode_reply, framed_size, send_request
from grader.sandbox.stacks import call_chain, where
from grader.sandbox.zygote import WORLD_MARKER, ForkedProcess, ZygoteError, worker_environment, zygote_for

START_TIMEOUT_S = 120.0
FILE_SIZE_LIMIT_MB = 64
OUTPUT_READ_LIMIT = 2**20
STACK_DUMP_WAIT_S = 0.5
# After one rank fails, how long the others get to finish before they count as hung on it.
GRACE_AFTER_ERROR_S = 2.0
LAST_LOOK_STILL_S = 0.5  # at the limit: no byte moved for this long, look at the stacks
CANCEL = b"cancel"


@dataclass
class CallResult:
    """What a call returned on every rank, and what the grader measured around it."""

    steps: list[list[Any]]  # per rank, the result of every step of the script
    args: list[list[Any]] | None  # per rank, the last step's arguments after it ran
    seconds: float  # wall time in the grader, from GO to the last rank's reply
    rank_seconds: list[float]  # each rank's own time for the script (informational)
    counted_bytes: list[int] | None  # bytes each rank wrote during the call; None: not counted here
    printed: list[str] = field(default_factory=list)
    measurements: list[list[dict[str, Any]]] = field(default_factory=list)  # per rank, per step
    others_cpu_s: float = 0.0  # CPU seconds the machine spent on other processes during the call

    @property
    def bytes_sent(self) -> list[int]:
        """Bytes each rank wrote to sockets and files during the call. Where the system does not
        count them, reading them ends the check without a verdict (NotCountedHere)."""
        if self.counted_bytes is None:
            raise NotCountedHere()
        return self.counted_bytes

    @property
    def contention(self) -> float:
        """The share of the machine's CPU capacity during the call that went to processes other
        than this world's and the grader's: 0 on a quiet machine, near 1 when it is saturated."""
        capacity = self.seconds * CPUS
        return min(1.0, max(0.0, self.others_cpu_s / capacity)) if capacity > 0 else 0.0

    @property
    def outputs(self) -> list[Any]:
        """Per rank, what the first step returned (for a plain call: its return value)."""
        return [steps[0] for steps in self.steps]

    @property
    def output(self) -> Any:
        return self.steps[0][0]


CPUS = os.cpu_count() or 1


def _command_line(options: dict[str, Any]) -> list[str]:
    """The worker's options as `python -m grader.sandbox.worker` flags (the spawned start)."""
    argv = [sys.executable, "-m", "grader.sandbox.worker"]
    for name, value in options.items():
        for item in value if isinstance(value, list) else [value]:
            argv += [f"--{name.replace('_', '-')}", str(item)]
    return argv


class WorkerProcess:
    """One worker: its process, its pipes, its output log and its stack-dump file.

    `start` is "fork" (from the zygote of this process and device: milliseconds) or "spawn" (a
    fresh interpreter that imports torch: seconds; kept to measure the difference)."""

    def __init__(self, workdir: Path, rank: int, options: dict[str, Any], device: str, start: str = "fork") -> None:
        self.rank = rank
        self.log_path = workdir / f"rank{rank}.log"
        self.stack_path = workdir / f"rank{rank}.stacks"
        self.stack_path.touch()
        self.comm_path = workdir / f"rank{rank}.comm"
        options = {**options, "rank": rank, "stack_file": str(self.stack_path), "comm_file": str(self.comm_path)}
        request_read, request_write = os.pipe()
        reply_read, reply_write = os.pipe()
        try:
            with open(self.log_path, "ab") as log:
                if start == "fork":
                    self.process: subprocess.Popen | ForkedProcess = self._fork(
                        options, workdir, device, (request_read, reply_write, log.fileno())
                    )
                else:
                    self.process = subprocess.Popen(
                        [*_command_line(options), "--fd-in", str(request_read), "--fd-out", str(reply_write)],
                        pass_fds=(request_read, reply_write),
                        stdin=subprocess.DEVNULL,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        cwd=workdir,
                        env={**worker_environment(device), WORLD_MARKER: str(workdir)},
                        start_new_session=True,  # its own process group: kill takes its children too
                    )
        finally:
            os.close(request_read)
            os.close(reply_write)
        self.requests = Connection(request_write, readable=False)
        self.replies = Connection(reply_read, writable=False)
        self._log_offset = 0
        self._stack_offset = 0

    @staticmethod
    def _fork(options: dict[str, Any], workdir: Path, device: str, fds: tuple[int, int, int]) -> ForkedProcess:
        """A worker forked by the zygote; a zygote that died is replaced once."""
        for attempt in range(2):
            zygote = zygote_for(device, worker_environment(device), WORLD_MARKER)
            try:
                return ForkedProcess(zygote, zygote.fork(options, workdir, WORLD_MARKER, fds))
            except ZygoteError as error:
                if attempt or zygote.alive:
                    raise SubmissionError("start", "", f"the grader's zygote failed: {error}") from None
        raise AssertionError("unreachable")

    def send(self, payload: bytes) -> bool:
        try:
            self.requests.send_bytes(payload)
            return True
        except OSError:
            return False

    def bytes_written(self) -> int | None:
        """Bytes this process has written with write/writev (None: this system does not count them)."""
        return system.bytes_written(self.process.pid)

    def log_size(self) -> int:
        try:
            return self.log_path.stat().st_size
        except OSError:
            return 0

    def stack_size(self) -> int:
        try:
            return self.stack_path.stat().st_size
        except OSError:
            return 0

    def new_output(self) -> str:
        """What the worker printed since the last call: its last OUTPUT_READ_LIMIT bytes."""
        size = self.log_size()
        skipped = max(0, size - self._log_offset - OUTPUT_READ_LIMIT)
        try:
            with open(self.log_path, "rb") as log:
                log.seek(self._log_offset + skipped)
                data = log.read(size - self._log_offset - skipped)
        except OSError:
            return ""
        self._log_offset += skipped + len(data)
        text = data.decode(errors="replace")
        return f"[... {skipped:,} bytes of output cut ...]\n{text}" if skipped else text

    def dump_stack(self) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(OSError):
                os.kill(self.process.pid, signal.SIGUSR1)

    def new_stacks(self) -> str:
        with open(self.stack_path, "rb") as dump:
            dump.seek(self._stack_offset)
            data = dump.read()
        self._stack_offset += len(data)
        return data.decode(errors="replace")

    def exit_description(self) -> str:
        code = self.process.poll()
        if code is None:
            return "was still running"
        if code < 0:
            name = signal.Signals(-code).name
            if name == "SIGXFSZ":
                return f"was killed by SIGXFSZ: it wrote more than {FILE_SIZE_LIMIT_MB} MiB to a file or its output"
            return f"was killed by {name}" + (" (a crash in native code)" if name == "SIGSEGV" else "")
        return f"exited with code {code} (sys.exit or os._exit in the submission?)"

    def kill(self) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(OSError):
                os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()
        self.requests.close()
        self.replies.close()


def stacks_now(workers: list[WorkerProcess], wait_s: float = STACK_DUMP_WAIT_S) -> dict[int, str]:
    """Every worker's stack by rank, asked of all of them at once (each answers on its own)."""
    before = {w.rank: w.stack_size() for w in workers}
    for worker in workers:
        worker.dump_stack()
    deadline = time.monotonic() + wait_s
    while any(w.stack_size() == before[w.rank] for w in workers) and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.02)  # faulthandler writes a dump in several pieces
    return {w.rank: w.new_stacks() for w in workers}


def _chain_lines(rank: int, chains: dict[int, tuple[str, ...]]) -> list[str]:
    """The calls that led `rank` where it waits, shown once for all the ranks that share them
    (after the first of them)."""
    chain = chains[rank]
    sharing = [r for r, other in chains.items() if other == chain]
    if not chain or sharing[0] != rank:
        return []
    who = f" (ranks {', '.join(map(str, sharing))})" if len(sharing) > 1 else ""
    return [f"      the calls that led there, outermost first{who}:", *(f"        {frame}" for frame in chain)]


def deadlock_summary(function: str, deadlock: Deadlock, size: int) -> str:
    """The first line of a deadlock's report: who waits, who returned, how long nothing moved."""
    hung = sorted(deadlock.stacks)
    who = "every rank" if len(hung) == size else f"rank{'s' if len(hung) > 1 else ''} " + ", ".join(map(str, hung))
    text = (
        f"{function} deadlocked: {who} waited in a communication call and no rank moved a byte "
        f"for {deadlock.still_s:.1f} s"
    )
    if deadlock.returned:
        ranks = ", ".join(map(str, deadlock.returned))
        text += f" (rank{'s' if len(deadlock.returned) > 1 else ''} {ranks} had already returned)"
    return text + "; where each rank was:"


def _tail(text: str, lines: int = 12) -> str:
    kept = text.rstrip().splitlines()[-lines:]
    return "\n".join("    " + line for line in kept)


_open_worlds: weakref.WeakSet[World] = weakref.WeakSet()


@atexit.register
def close_open_worlds() -> None:
    """Worlds a notebook kept between calls end with its kernel: workers killed, folder removed."""
    for world in list(_open_worlds):
        world.close()


class World:
    """N workers (ranks) that run one call at a time, together."""

    def __init__(
        self,
        size: int,
        *,
        submission: Path | None,
        device: str = "cpu",
        memory_mb: int = 0,
        forbidden: tuple[str, ...] = (),
        distributed: bool = True,
        hidden: tuple[Path, ...] = (),
        start: str = "fork",
    ) -> None:
        self.size = size
        self.distributed = distributed
        # Deadlocks are looked for where gloo moves every byte through read/write calls the
        # kernel counts; NCCL's bytes go over NVLink and InfiniBand, unseen (deadlock.py).
        self.watch_deadlocks = distributed and device == "cpu"
        self.submission = submission.resolve() if submission else None
        self.workdir = Path(tempfile.mkdtemp(prefix=f"grader-world{size}-"))
        _open_worlds.add(self)
        options = {
            "world_size": size,
            "device": device,
            "memory_mb": memory_mb,
            "file_size_mb": FILE_SIZE_LIMIT_MB,
            "hide": [str(folder) for folder in hidden],
            "store": str(self.workdir / "store") if distributed else "",
            "submission": str(self.submission) if self.submission else "",
            "forbidden": ",".join(forbidden),
        }
        self.workers: list[WorkerProcess] = []
        try:
            for rank in range(size):
                self.workers.append(WorkerProcess(self.workdir, rank, options, device, start))
        except SubmissionError:
            self.alive = True
            self.close()
            raise
        self.alive = True
        self.deadlock: Deadlock | None = None  # what the last call's deadlock looked like, if it had one
        self._step_names: list[str] = []
        self._await_ready()

    def _await_ready(self) -> None:
        replies, failed = self._collect(self.workers, time.monotonic() + START_TIMEOUT_S)
        if failed or len(replies) < self.size:
            logs = "\n".join(_tail(w.new_output()) for w in self.workers)
            self.close()
            raise SubmissionError("start", "", f"the grader's workers did not start:\n{logs}")

    def _collect(
        self,
        workers: list[WorkerProcess],
        deadline: float,
        grace_on_error: bool = False,
        watch: bool = False,
        limit: Callable[[], float] | None = None,
    ) -> tuple[dict[int, tuple[Any, int]], list[WorkerProcess]]:
        """Replies by rank (message, framed size) until all answered or the deadline; and the
        workers whose pipe closed (the process died). With `watch`, a deadlock among the ranks
        that have not replied ends the wait early and is left in self.deadlock. `limit()`, when
        given, is the deadline in force now (a limit that follows the reference: limits.py)."""
        pending = {w.replies: w for w in workers}
        replies: dict[int, tuple[Any, int]] = {}
        dead: list[WorkerProcess] = []
        moved, still_since = self._io_total(), time.monotonic()
        looked_at = still_since  # the last look at the stacks (or the start): the next waits STILL_S
        while pending:
            if limit is not None:
                deadline = min(deadline, limit())
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            polling = watch or limit is not None
            ready = wait(list(pending), timeout=min(remaining, POLL_S) if polling else remaining)
            if watch and not ready and not dead:
                now, total = time.monotonic(), self._io_total()
                if total != moved:
                    moved, still_since, looked_at = total, now, now
                elif now - looked_at >= STILL_S:
                    self.deadlock = self._deadlock(list(pending.values()), replies, now - still_since)
                    if self.deadlock is not None:
                        break
                    # The stack dumps wrote bytes: not a move of the ranks', so the stillness goes on.
                    moved, looked_at = self._io_total(), time.monotonic()
            for conn in ready:
                worker = pending.pop(conn)
                try:
                    payload = conn.recv_bytes()
                except (EOFError, OSError):
                    worker.process.wait(timeout=5)
                    dead.append(worker)
                    deadline = min(deadline, time.monotonic() + GRACE_AFTER_ERROR_S)
                    continue
                try:
                    message = decode_reply(payload)
                except ValueError as error:
                    message = ("error", {"kind": "bad_return", "message": str(error)})
                replies[worker.rank] = (message, framed_size(payload))
                if grace_on_error and message[0] == "error":
                    deadline = min(deadline, time.monotonic() + GRACE_AFTER_ERROR_S)
        if watch and pending and not dead and self.deadlock is None and self._io_total() == moved:
            # The limit came before a quiet moment to look: on a busy machine some thread is
            # always runnable. Ranks that all sit in communication with nothing moving are
            # deadlocked, not slow, whatever the machine's load.
            still_s = time.monotonic() - still_since
            if still_s >= LAST_LOOK_STILL_S:
                self.deadlock = self._deadlock(list(pending.values()), replies, still_s, busy_machine=True)
        return replies, dead

    def _io_total(self) -> int:
        return sum(system.io_activity(w.process.pid) for w in self.workers)

    def _deadlock(
        self,
        hung: list[WorkerProcess],
        replies: dict[int, tuple[Any, int]],
        still_s: float,
        busy_machine: bool = False,
    ) -> Deadlock | None:
        """A Deadlock when every rank in `hung` is blocked in a communication call, else None.
        Before the limit a runnable thread means "look again later" (a rank waiting only for
        the CPU moves no byte either); at the limit (`busy_machine`) the stacks alone decide."""
        if not busy_machine and any(system.any_thread_running(w.process.pid) for w in self.workers):
            return None
        stacks = stacks_now(hung)
        if not all(in_communication(stack, self.submission) for stack in stacks.values()):
            return None
        lines = {w.rank: read_comm_line(w.comm_path)[1] for w in hung}
        return Deadlock(stacks, lines, sorted(replies), still_s)

    def call(
        self,
        requests: list[dict[str, Any]],
        time_limit: float,
        function: str,
        reference_limit: ReferenceLimit | None = None,
    ) -> CallResult:
        """Run one request per rank; raise SubmissionError (after cleaning up) on any failure.
        With `reference_limit`, the call's limit follows the reference's time on it (limits.py);
        `time_limit` is then its ceiling."""
        if not self.alive:
            raise SubmissionError("start", function, "this world was closed")
        # Each step's name, for a report that names the step a hang was in.
        self._step_names = [step.get("shown_as", function) for step in requests[0].get("steps", ())]
        for worker, request in zip(self.workers, requests):
            send_request(worker.requests, request)
        staged, dead = self._collect(self.workers, time.monotonic() + time_limit)
        errors = {r: m[1] for r, (m, _) in staged.items() if m[0] == "error"}
        if dead or len(staged) < self.size or errors:
            ready = [self.workers[r] for r, (m, _) in staged.items() if m[0] == "staged"]
            for worker in ready:
                worker.send(CANCEL)
            self._collect(ready, time.monotonic() + GRACE_AFTER_ERROR_S)
            printed = [w.new_output() for w in self.workers]
            keep = not dead and len(staged) == self.size
            self._fail(function, "importing", dead, staged, errors, time_limit, printed, keep)

        written_before = [w.bytes_written() for w in self.workers]
        logged_before = [w.log_size() for w in self.workers]
        dumped_before = [w.stack_size() for w in self.workers]
        self.deadlock = None
        busy_before, ours_before = system.machine_busy_s(), self._our_cpu_s()
        start = time.perf_counter()
        for worker in self.workers:
            worker.send(GO)
        began = time.monotonic()
        deadline = began + time_limit
        limit = None if reference_limit is None else (lambda: began + reference_limit.limit_s(time.monotonic() - began))
        replies, dead = self._collect(
            self.workers, deadline, grace_on_error=True, watch=self.watch_deadlocks, limit=limit
        )
        seconds = time.perf_counter() - start
        others_cpu_s = (system.machine_busy_s() - busy_before) - (self._our_cpu_s() - ours_before)
        written_after = [w.bytes_written() for w in self.workers]
        bytes_sent = None
        if None not in written_before + written_after:
            bytes_sent = [
                after
                - before
                - (w.log_size() - logged)
                - (w.stack_size() - dumped)
                - (replies[w.rank][1] if w.rank in replies else 0)
                for w, after, before, logged, dumped in zip(
                    self.workers, written_after, written_before, logged_before, dumped_before
                )
            ]
        printed = [w.new_output() for w in self.workers]
        errors = {r: m[1] for r, (m, _) in replies.items() if m[0] == "error"}
        if dead or len(replies) < self.size or errors:
            # Ranks that failed may have left messages in flight: a world of ranks is certainly
            # clean enough to keep only when no rank wrote a byte; a worker without a process
            # group has no peers to leave messages for. A rank that left a thread running is
            # never clean.
            quiet = not self.distributed or (bytes_sent is not None and not any(bytes_sent))
            keep = not dead and len(replies) == self.size and quiet
            keep = keep and all(e["kind"] != "thread" for e in errors.values())
            why = ""
            if reference_limit is not None:
                time_limit = reference_limit.limit_s(seconds)
                why = reference_limit.explain(time_limit)
            self._fail(function, "", dead, replies, errors, time_limit, printed, keep, why)
        messages = [replies[r][0] for r in range(self.size)]
        return CallResult(
            steps=[m[1] for m in messages],
            args=None if messages[0][2] is None else [m[2] for m in messages],
            seconds=seconds,
            rank_seconds=[float(m[3]) for m in messages],
            counted_bytes=None if bytes_sent is None else [max(0, b) for b in bytes_sent],
            printed=printed,
            measurements=[m[4] for m in messages],
            others_cpu_s=max(0.0, others_cpu_s),
        )

    def _our_cpu_s(self) -> float:
        """CPU seconds used so far by this world's workers and by the grader's process."""
        return system.process_cpu_s(os.getpid()) + sum(system.process_cpu_s(w.process.pid) for w in self.workers)

    def _fail(
        self,
        function: str,
        phase: str,
        dead: list[WorkerProcess],
        replies: dict[int, tuple[Any, int]],
        errors: dict[int, dict[str, str]],
        time_limit: float,
        printed: list[str] | None = None,
        keep: bool = False,
        why_limit: str = "",
    ) -> None:
        """Describe the failure from the student's point of view, clean up, and raise."""
        label = (lambda r: f"rank {r}: ") if self.size > 1 else (lambda r: "")
        hung = [w for w in self.workers if w.rank not in replies and w not in dead]
        deadlock = self.deadlock
        seen = deadlock.stacks if deadlock else {}
        for worker in hung:
            if worker.rank not in seen:
                worker.dump_stack()
        if dead or any(w.rank not in seen for w in hung):
            time.sleep(STACK_DUMP_WAIT_S)
        stacks = {w.rank: seen.get(w.rank) or w.new_stacks() for w in hung}
        # The step of the script the ranks hung in (not known while importing: none has started).
        hung_step = read_comm_line(hung[0].comm_path)[0] if hung and not phase else None
        lines: list[str] = []
        exception_type, step = "", None
        if dead:
            kind = "crash"
            for worker in dead:
                lines.append(f"{label(worker.rank)}the process {worker.exit_description()}")
                stack = worker.new_stacks()
                if "Fatal Python error" in stack:
                    lines.append(f"    crashed at {where(stack, self.submission)}")
                    lines += [f"      {frame}" for frame in call_chain(stack, self.submission)]
        elif errors:
            first = min(errors)
            kind = errors[first]["kind"]
            exception_type, step = errors[first].get("type", ""), errors[first].get("step")
            same = [r for r, e in errors.items() if e["message"] == errors[first]["message"]]
            who = "every rank" if len(same) == self.size > 1 else label(first).rstrip(": ")
            message = errors[first]["message"]
            if "\n" in message:
                message = "\n" + textwrap.indent(message, "  ")
            lines.append(f"{who}: {message}" if who else message.lstrip("\n"))
        elif deadlock is not None:
            kind, step = "deadlock", hung_step
            lines.append(deadlock_summary(self._step_name(step, function), deadlock, self.size))
        else:
            kind, step = "timeout", hung_step
            what = f"{self._step_name(step, function)} did not finish within {time_limit:.2g} s{why_limit}"
            if phase:
                what += f" ({phase} the submission's files)"
            lines.append(what + ("; where each rank was:" if self.size > 1 else "; it was at:"))
        if hung:
            if kind not in ("timeout", "deadlock"):
                lines.append("and these ranks were left waiting (stuck on the failed rank?):")
            chains = {w.rank: tuple(call_chain(stacks[w.rank], self.submission)) for w in hung}
            for worker in hung:
                line = f"  {label(worker.rank)}{where(stacks[worker.rank], self.submission)}"
                waiting = deadlock.comm_lines.get(worker.rank) if deadlock else ""
                lines.append(line + (f"\n      {waiting}" if waiting else ""))
                lines += _chain_lines(worker.rank, chains)
        if deadlock is not None and (cycle := deadlock.cycle_text()):
            lines.append(f"the cycle: {cycle}")
        if printed and kind in ("crash", "timeout", "deadlock") and any(p.strip() for p in printed):
            for rank, text in enumerate(printed):
                if text.strip():
                    lines.append(f"{label(rank)}last output:\n{_tail(text)}")
        if not keep:
            self.close()
        error = SubmissionError(kind, function, "\n".join(lines), exception_type)
        error.printed = printed or []
        error.step = step
        raise error

    def _step_name(self, step: int | None, function: str) -> str:
        """The name of step `step` of the last call; `function` for a call of one step."""
        names = self._step_names
        return names[step] if len(names) > 1 and step is not None and 0 <= step < len(names) else function

    def close(self) -> None:
        if not self.alive:
            return
        self.alive = False
        unmarked = system.unmarked_descendants([w.process.pid for w in self.workers])  # before they are orphaned
        for worker in self.workers:
            worker.kill()
        for pid in unmarked:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        _kill_marked(str(self.workdir))
        shutil.rmtree(self.workdir, ignore_errors=True)


def _kill_marked(workdir: str) -> None:
    """SIGKILL every process whose environment says it belongs to the world in `workdir`: what
    a submission started in a session of its own escapes the process-group kill, not this."""
    for _ in range(3):  # a process may fork while it is being looked for
        found = system.processes_with_environment(f"{WORLD_MARKER}={workdir}")
        for pid in found:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        if not found:
            return
        time.sleep(0.05)
