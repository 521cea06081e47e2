"""Backfilling without a reservation: any later job that fits starts, even one that runs past
the head's shadow time on the GPUs the head needs, so the head waits behind it."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: scheduler.py
# select: backfilling_never_delays or long_job_backfills
# fails: test_backfilling_never_delays_the_heads_reservation
# kind:
# message: must not backfill


def _reserve(job, running, free, usage, limit, cluster):
    return float("inf"), Counter(), 0  # no shadow time: every later job "ends before it"
