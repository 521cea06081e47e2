# Your working copy: replace every `raise NotImplementedError` with your implementation.
# (Generated from the course's reference by `python -m grader sync`.)
"""How often a large run fails, how often to checkpoint it, and how much of its time is useful
(lecture 14-reliability, sections 1 and 6).

Failures are taken as independent and memoryless (a Poisson process), the assumption of both
papers below: a job of G GPUs, each failing on average once every m seconds, fails once every
M = m / G seconds.

Young (1974), "A first order approximation to the optimum checkpoint interval": with a
checkpoint of delta seconds and an MTBF of M, the compute between two checkpoints that wastes
least is tau = sqrt(2 delta M).

Daly (2006), "A higher order estimate of the optimum checkpoint interval for restart dumps":
    tau = sqrt(2 delta M) * (1 + sqrt(delta / (2M)) / 3 + (delta / (2M)) / 9) - delta   if delta < 2M
    tau = M                                                                           otherwise
and the expected wall time of T_s seconds of work, checkpointed every tau seconds of compute,
with restarts of R seconds (a failure may strike during a restart, or a checkpoint, too):
    T_w = M e^(R/M) (e^((tau + delta)/M) - 1) T_s / tau
"""

from __future__ import annotations

import math


def job_mtbf_s(gpus: int, gpu_mtbf_s: float) -> float:
    """The mean time between failures of a job on `gpus` GPUs, in seconds, when each GPU (with
    its share of the host, network and power) fails on average once every `gpu_mtbf_s` seconds:
    independent failures add their rates, so M = gpu_mtbf_s / gpus.
    Raises ValueError for gpus that is not an int >= 1 (a float such as 8.0 is not an int, nor is
    a bool), or gpu_mtbf_s that is not > 0.
    """
    raise NotImplementedError("implement job_mtbf_s (lectures/14-reliability.md, section 1)")


def optimal_checkpoint_interval(checkpoint_s: float, mtbf_s: float, method: str = "daly") -> float:
    """The compute time between two checkpoints, in seconds, that wastes the least time, for a
    checkpoint that takes `checkpoint_s` (delta) and a job MTBF of `mtbf_s` (M): Young's
    sqrt(2 delta M) with method="young", Daly's higher-order estimate (the module docstring,
    including tau = M once delta >= 2M) with method="daly", the default. A checkpoint that costs nothing
    (delta = 0) gives 0 with both: checkpoint all the time.
    Raises ValueError for a method other than "young" or "daly", checkpoint_s < 0, or mtbf_s
    that is not > 0.
    """
    raise NotImplementedError("implement optimal_checkpoint_interval (lectures/14-reliability.md, section 6)")


def goodput(gpus: int, gpu_mtbf_s: float, checkpoint_s: float, restart_s: float, interval_s: float) -> float:
    """The expected fraction of wall time spent on useful work (T_s / T_w, Daly 2006: the module
    docstring) for a job on `gpus` GPUs that each fail once every `gpu_mtbf_s` seconds on
    average, checkpointed after every `interval_s` seconds of compute (tau) with checkpoints of
    `checkpoint_s` (delta) and restarts of `restart_s` (R). Work since the last checkpoint is
    lost at a failure; a failure during a checkpoint or a restart counts like any other.
    Without failures (M large) it tends to tau / (tau + delta).
    Raises ValueError for gpus that is not an int >= 1 (as job_mtbf_s), gpu_mtbf_s or interval_s
    that is not > 0, or checkpoint_s or restart_s < 0.
    """
    raise NotImplementedError("implement goodput (lectures/14-reliability.md, section 6)")
