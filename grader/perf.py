"""Performance checks: counted bounds, and time as a ratio against a reference in the same run.

Never an absolute time: machines are shared and noisy. Timed checks interleave rounds of the
candidate and the reference (so both see the same load), take medians, and retry a failing
measurement a few times, keeping the best ratio.

Load still changes a ratio: a wasteful submission whose waste is waiting (a sleep, a blocking
receive) slows down less than a reference that computes, when both must share the CPUs with other
work. So every timed call also reports its contention: the share of the machine's CPU capacity
during the call that went to processes other than the timed world and the grader (the machine's
busy time less the timed processes' own (grader/system), read by the grader from outside; see
grader/sandbox/pool.py). A measurement whose rounds, taken together, saw more than
CONTENTION_LIMIT of the machine busy elsewhere gives no verdict: the check reports "not measured
reliably", worth no points either way, and the student is told to rerun. When the warm-up round
already finds the machine saturated, the rounds are not taken at all.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

# Measured on the course's 2-core machine, over the rounds of one measurement (1, 2 and 4 ranks):
# 0-8% with the grader alone (CPU time is counted in 10 ms ticks, so a short call reads a little
# either way); 33-57% with two CPU-bound processes beside it, enough to flip a ratio whose waste
# is waiting.
CONTENTION_LIMIT = 0.25
# Words in the names of the timed checks (a time ratio), and only of those: every other
# performance check counts (bytes, memory, operators, FLOPs) and reads the same on any machine.
TIMED_CHECK_WORDS = ("time_within", "at_least_2x")
# Past this in the warm-up round, a measurement is not attempted: on a quiet machine other
# processes never take three quarters of the CPUs for the length of a call and its reference.
SATURATED = 0.75


class Timed(Protocol):
    """What a timed call returns (grader.sandbox.CallResult): its seconds, and the share of the
    machine's CPUs that other processes used meanwhile."""

    @property
    def seconds(self) -> float: ...

    @property
    def contention(self) -> float: ...


@dataclass(frozen=True)
class Timing:
    """A measured time that is not a worker call's own (e.g. a call's time per repetition)."""

    seconds: float
    contention: float = 0.0


@dataclass(frozen=True)
class Ratio:
    ratio: float  # candidate median / reference median
    candidate_s: float
    reference_s: float
    contention: float = 0.0  # of all the rounds of both, weighted by their time

    @property
    def reliable(self) -> bool:
        return self.contention <= CONTENTION_LIMIT


class NotMeasuredReliably(Exception):
    """A timed check ran on a machine too busy to judge it: no verdict, no points; rerun."""


ON_THIS_SYSTEM = "not measured on this system"


class NotOnThisSystem(NotMeasuredReliably):
    """A check this system cannot measure or run (grader/system): no verdict and no points,
    whatever the submission; a rerun changes nothing, grading on Linux does."""


class NotCountedHere(NotOnThisSystem):
    """A check on bytes sent, on a system that does not count a process's bytes (macOS)."""

    def __init__(self) -> None:
        super().__init__(NOT_COUNTED)


NOT_COUNTED = (
    f"{ON_THIS_SYSTEM}: it keeps no count of the bytes a process writes (macOS), so the bytes your "
    "ranks sent cannot be checked here; this check gives no points until it is graded on Linux "
    "(your course's grader, or WSL2 and Codespaces: README.md)"
)
NO_TRITON = (
    f"{ON_THIS_SYSTEM}: Triton has no build for it (macOS), so Triton kernels cannot run here; "
    "this check gives no points until it is graded on Linux (your course's grader, or WSL2 and "
    "Codespaces: README.md)"
)


def interleaved_ratio(
    candidate: Callable[[], Timed], reference: Callable[[], Timed], rounds: int = 7, warmup: int = 1
) -> Ratio:
    """Median of `rounds` timings of each, taken alternately. When the warm-up already shows a
    saturated machine (SATURATED), the rounds are not taken: they could give no verdict."""
    for _ in range(warmup):
        mine, theirs = candidate(), reference()
    if warmup:
        seconds = mine.seconds + theirs.seconds
        contention = (mine.contention * mine.seconds + theirs.contention * theirs.seconds) / seconds
        if contention > SATURATED:
            return Ratio(mine.seconds / theirs.seconds, mine.seconds, theirs.seconds, contention)
    candidate_times, reference_times, busy_elsewhere = [], [], 0.0
    for _ in range(rounds):
        mine, theirs = candidate(), reference()
        candidate_times.append(mine.seconds)
        reference_times.append(theirs.seconds)
        busy_elsewhere += mine.contention * mine.seconds + theirs.contention * theirs.seconds
    c, r = statistics.median(candidate_times), statistics.median(reference_times)
    # One share over all rounds: CPU time is counted in ticks, too coarse for one short call.
    contention = busy_elsewhere / (sum(candidate_times) + sum(reference_times))
    return Ratio(c / r, c, r, contention)


def best_ratio(measure: Callable[[], Ratio], limit: float, retries: int = 3) -> Ratio:
    """Measure up to `retries` times while the ratio exceeds `limit`, or once more when the
    machine was a little too busy to judge it; keep the best reliable measurement (the least
    contended if none was).

    A ratio over twice the limit is not retried: noise in a median of interleaved rounds does
    not double a time, so only near misses get another chance.
    """
    best, busy_retries = measure(), 1
    for _ in range(retries - 1):
        if best.reliable and (best.ratio <= limit or best.ratio > 2 * limit):
            break
        # A machine a little too busy gets one more try; a saturated one is rarely quiet a
        # moment later.
        if not best.reliable and (not busy_retries or best.contention > 2 * CONTENTION_LIMIT):
            break
        busy_retries -= not best.reliable
        again = measure()
        if not best.reliable:
            best = again if again.reliable or again.contention < best.contention else best
        elif again.reliable and again.ratio < best.ratio:
            best = again
    return best


def require_reliable(ratio: Ratio) -> None:
    """Raise NotMeasuredReliably unless the ratio was measured on a machine quiet enough."""
    if not ratio.reliable:
        raise NotMeasuredReliably(
            f"not measured reliably: the machine was busy (other processes used {ratio.contention:.0%} of its "
            f"CPUs while this check was timed; the limit is {CONTENTION_LIMIT:.0%}), so this timed check gives "
            f"no points either way for now: a rerun of the grading on a quieter machine gives them back."
        )


def allreduce_bytes_bound(nbytes: int, world_size: int) -> float:
    """The least any allreduce can send per rank: 2(p-1)/p * N (reduce-scatter + all-gather)."""
    return 2 * (world_size - 1) / world_size * nbytes


# Message framing: gloo adds a header of about 150 bytes to every message (measured), a ring
# sends 2(p-1) of them; 4 KiB covers that for p <= 8, and 0.1% covers any rounding of chunk
# sizes. On a 16 MiB tensor the smallest wasteful excess (one extra chunk) is megabytes.
BYTES_SLACK_FIXED = 4096
BYTES_SLACK_RELATIVE = 1e-3


def with_slack(bound: float) -> float:
    return bound * (1 + BYTES_SLACK_RELATIVE) + BYTES_SLACK_FIXED
