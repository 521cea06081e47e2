"""Wasteful: static batching. Waiting requests are admitted only when no request is running, so
a batch runs until its longest request finishes while the places of finished ones stay empty."""
# target: scheduler.py

_continuous_schedule = Scheduler._schedule


def _static_schedule(self):
    if not self.running:
        return _continuous_schedule(self)
    waiting, self.waiting = self.waiting, []
    try:
        return _continuous_schedule(self)
    finally:
        self.waiting = sorted(waiting + self.waiting, key=lambda r: r.arrival)


Scheduler._schedule = _static_schedule
