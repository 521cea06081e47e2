# Your working copy: replace every `raise NotImplementedError` with your implementation.
# (Generated from the course's reference by `python -m grader sync`.)
"""Which rank makes every step slow (lecture 14-reliability, section 3).

In synchronous training every rank ends a step at the same collective, so every rank's step
takes as long as the slowest rank's: step times alone cannot name the straggler. What differs is
how a step is spent. The slow rank computes longest and arrives at the collective last, so it
waits least; the healthy ranks arrive early and wait for it. A rank's compute time in a step is
its step time minus its time blocked in collectives.
"""

from __future__ import annotations

import statistics


def straggler(step_times: list[list[float]], wait_times: list[list[float]], threshold: float = 1.2) -> int | None:
    """The rank that slows the job down, or None.

    step_times[r][s] is the wall time, in seconds, of step s on rank r; wait_times[r][s] the part
    of it that rank r spent blocked in collectives. A rank's compute time in a step is
    step_times[r][s] - wait_times[r][s]; its typical compute time is the median over the steps
    (one slow step, a garbage collection say, does not make a straggler). The straggler is the
    rank with the largest typical compute time, if that is more than `threshold` times the median
    of the other ranks' typical compute times; otherwise, and for a single rank, None. Among
    ranks with the same largest typical compute time, the lowest rank.

    Raises ValueError when there is no rank or no step, when the two tables do not have the
    same shape (every rank the same number of steps), when a time is negative, or a wait is
    longer than its step, or when threshold < 1.
    """
    raise NotImplementedError("implement straggler (lectures/14-reliability.md, section 3)")
