"""First come, first served: the pass ends at the first job that cannot start (backfill=False
whatever the caller asks). Every rule holds, but the holes before a large job stay empty."""

# target: scheduler.py

_schedule_with_backfill_option = schedule


def schedule(jobs, queues, cluster, backfill=True):
    return _schedule_with_backfill_option(jobs, queues, cluster, backfill=False)
