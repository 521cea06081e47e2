# Your working copy: replace every `raise NotImplementedError` with your implementation.
# (Generated from the course's reference by `python -m grader sync`.)
"""Which rank makes every step slow, and where a step's time goes (lecture 14-reliability,
section 3).

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
    ranks with the same largest typical compute time, the lowest rank. Both medians are
    statistics.median's: of an even count of values, the mean of the two middle ones (not the
    lower one, which torch.median returns).

    Raises ValueError when there is no rank or no step, when the two tables do not have the
    same shape (every rank the same number of steps), when a time is negative, or a wait is
    longer than its step, or when threshold < 1.
    """
    raise NotImplementedError("implement straggler (lectures/14-reliability.md, section 3)")


def step_breakdown(trace: dict) -> dict[str, float]:
    """Where the time of one training step went, from its profiler trace: a chrome trace as
    torch.profiler's export_chrome_trace writes it (json.load of the file), such as
    grader.models.step_trace records.

    Only complete events count: those of trace["traceEvents"] with "ph" == "X", each covering
    [ts, ts + dur) in microseconds. Compute events are those of category ("cat") "cpu_op" whose
    name does not start with "c10d::" (those only hand a collective to the process group);
    communication events are those whose name starts with "gloo:" or "nccl:" (the spans of the
    collectives themselves). Events may nest and overlap: a time is compute when any compute
    event covers it, communication when any communication event covers it. The step runs from
    the first start to the last end of the compute and communication events.

    Returns, in seconds: {"step_s": the step's length, "compute_s": the time covered by compute,
    "communication_s": the time covered by communication, "exposed_communication_s": the time
    covered by communication and not by compute (what overlap would hide), "idle_s": the time
    covered by neither}.

    Raises ValueError when the trace is not a dict with a "traceEvents" list, or holds neither a
    compute nor a communication event (communication alone, or compute alone, is a step).
    """
    raise NotImplementedError("implement step_breakdown (lectures/14-reliability.md, section 3)")


# (Write any helper functions you need here.)
