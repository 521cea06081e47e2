"""Balancing a pipeline: contiguous stages with the smallest bottleneck (lecture 08, section 2).

A pipeline runs at the pace of its slowest stage, so the layers are cut into p contiguous
stages whose largest total cost is as small as possible. Dynamic programming over the
prefixes is exact: best(k, i), the smallest bottleneck of the first i layers in k stages, is

    best(k, i) = min over j < i of max(best(k-1, j), cost(j..i))

A greedy cut ("fill a stage up to the average, then start the next") is not optimal.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def partition(layer_costs: Sequence[float], p: int) -> list[tuple[int, int]]:
    """Cut layers 0..n-1 into p contiguous, non-empty stages minimising the largest stage cost
    (the sum of its layers' costs), exactly, not greedily.

    Returns p pairs (start, end): stage s holds layers start..end-1; the first starts at 0,
    each starts where the previous ended, the last ends at n. Costs are numbers >= 0 (ints or
    floats). Raises ValueError unless 1 <= p <= n, or if a cost is negative or not finite.
    """
    ### BEGIN SOLUTION
    costs = [float(c) for c in layer_costs]
    n = len(costs)
    if not isinstance(p, int) or not 1 <= p <= n:
        raise ValueError(f"p must be an integer between 1 and the number of layers ({n}), not {p!r}")
    if any(not math.isfinite(c) or c < 0 for c in costs):
        raise ValueError("every layer cost must be a finite number >= 0")

    def cost(j: int, i: int) -> float:  # layers j..i-1, summed in order (as the caller would)
        return math.fsum(costs[j:i])

    # best[k][i]: smallest bottleneck of layers 0..i-1 in k stages; cut[k][i]: where its last stage starts
    best = [[math.inf] * (n + 1) for _ in range(p + 1)]
    cut = [[0] * (n + 1) for _ in range(p + 1)]
    best[0][0] = 0.0
    for k in range(1, p + 1):
        for i in range(k, n - (p - k) + 1):
            for j in range(k - 1, i):
                candidate = max(best[k - 1][j], cost(j, i))
                if candidate < best[k][i]:
                    best[k][i], cut[k][i] = candidate, j
    stages, end = [], n
    for k in range(p, 0, -1):
        start = cut[k][end]
        stages.append((start, end))
        end = start
    return stages[::-1]
    ### END SOLUTION
