"""Performance checks: counted bounds, and time as a ratio against a reference in the same run.

Never an absolute time: machines are shared and noisy. Timed checks interleave rounds of the
candidate and the reference (so both see the same load), take medians, and retry a failing
measurement a few times, keeping the best ratio.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Ratio:
    ratio: float  # candidate median / reference median
    candidate_s: float
    reference_s: float


def interleaved_ratio(
    candidate: Callable[[], float], reference: Callable[[], float], rounds: int = 7, warmup: int = 1
) -> Ratio:
    """Median of `rounds` timings of each, taken alternately; each callable returns seconds."""
    for _ in range(warmup):
        candidate()
        reference()
    candidate_times, reference_times = [], []
    for _ in range(rounds):
        candidate_times.append(candidate())
        reference_times.append(reference())
    c, r = statistics.median(candidate_times), statistics.median(reference_times)
    return Ratio(c / r, c, r)


def best_ratio(measure: Callable[[], Ratio], limit: float, retries: int = 3) -> Ratio:
    """Measure up to `retries` times while the ratio exceeds `limit`; keep the best.

    A ratio over twice the limit is not retried: noise in a median of interleaved rounds does
    not double a time, so only near misses get another chance.
    """
    best = measure()
    for _ in range(retries - 1):
        if best.ratio <= limit or best.ratio > 2 * limit:
            break
        again = measure()
        best = again if again.ratio < best.ratio else best
    return best


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
