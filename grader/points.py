"""Points that add up exactly, in every payload.

A module's points are shared among its tests in proportion to their weights. Shares such as
100/3 have no exact binary form, so a client that adds the shares (GitHub Classroom's reporter,
Gradescope, nbgrader's gradebook) would print 99.99999999999999 or 100.0002. Every share is
therefore a multiple of 1/GRID with GRID a power of two: such numbers, and their sums, are
exact in binary floating point (while below 2**53 / GRID), so any client's float sum, in any
order, equals the module's points.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

GRID = 1024  # shares are multiples of 1/1024 of a point


def dyadic_shares(points: float, weights: Sequence[float]) -> list[float]:
    """`points` shared in proportion to `weights`, each share a multiple of 1/GRID, with the
    largest-remainder method (Hamilton's apportionment): every share is its exact quota rounded
    down to the grid, and the units left over go to the largest remainders (ties to the first).
    The shares sum, in floating point and in any order, exactly to `points` rounded to the grid.

    Raises ValueError for a negative weight or negative points.
    """
    if points < 0 or any(w < 0 for w in weights):
        raise ValueError(f"points and weights must be non-negative, got {points} and {list(weights)}")
    total = math.fsum(weights)
    if not weights or total == 0:
        return [0.0] * len(weights)
    units = round(points * GRID)
    quotas = [units * w / total for w in weights]
    shares = [math.floor(q) for q in quotas]
    by_remainder = sorted(range(len(quotas)), key=lambda i: (shares[i] - quotas[i], i))
    for i in by_remainder[: units - sum(shares)]:
        shares[i] += 1
    return [s / GRID for s in shares]
