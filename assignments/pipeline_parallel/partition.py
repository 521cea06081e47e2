# Your working copy: replace every `raise NotImplementedError` with your implementation.
# (Generated from the course's reference by `python -m grader sync`.)
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
    raise NotImplementedError("implement partition (lectures/08-pipeline-parallelism.md, section 2)")
