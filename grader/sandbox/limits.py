"""A call's time limit that follows the reference: an infinite loop costs seconds, not 30 s.

A deadlock is found in about a second (grader/sandbox/deadlock.py); what is left for the time
limit is code that computes forever. course.toml's limit (30 s for most modules) is the ceiling,
there for calls that are legitimately long. Once a call has run FLOOR_S seconds, the grader runs
the reference solution on the very same call, in workers of its own, while the student's call
goes on; the call's limit becomes FACTOR times the reference's time, never below FLOOR_S and
never above the ceiling. The reference is timed beside a student's call that is still running,
on the same machine, so both slow down together under load.

The limit stops code that never ends; it must never fail correct code that is merely slower, so
its margin is one no correct solution reaches: a hundred times the reference (a fit with a
hand-written L-BFGS loop took over twenty), and ten seconds at least (a loop in Python where
the reference calls one vectorized op). Speed is graded only by the performance checks, whose
docstrings say so.

Only where the reference solutions are at hand (the course's repository, an instructor's
grading), and never when a limit was chosen by hand (`--time-limit`, `--no-timeout`, a test's
own): elsewhere the ceiling is the limit.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

FLOOR_S = 10.0  # seconds a call always gets, and when the reference is first asked
FACTOR = 100.0  # a correct but slow submission gets this many times the reference's time


class ReferenceLimit:
    """The limit of one call: the ceiling until the reference has been timed, then its multiple.
    `measure()` runs the reference on the same call and returns its seconds (None: it failed).
    An exception it raises is a failure too, never an error left to the thread's hook: the run
    may outlive the call and be stopped under it when the grading ends, and pytest's hook
    formats such an error inside the thread, which on Python 3.11 parses source with ast beside
    the main thread (CPython gh-106905: a SystemError in a student's test)."""

    def __init__(self, ceiling_s: float, measure: Callable[[], float | None]) -> None:
        self.ceiling_s = ceiling_s
        self._measure = measure
        self._thread: threading.Thread | None = None
        self._reference_s: float | None = None
        self._measured = threading.Event()

    def _run(self) -> None:
        try:
            self._reference_s = self._measure()
        except Exception:  # the reference is advice: whatever broke its run, the ceiling stays
            self._reference_s = None
        finally:
            self._measured.set()

    def limit_s(self, elapsed_s: float) -> float:
        """The limit in force after `elapsed_s` seconds of the call."""
        if self.ceiling_s <= FLOOR_S:
            return self.ceiling_s
        if self._thread is None and elapsed_s >= FLOOR_S:
            self._thread = threading.Thread(target=self._run, name="reference-limit", daemon=True)
            self._thread.start()
        if not self._measured.is_set() or self._reference_s is None:
            return self.ceiling_s
        return min(self.ceiling_s, max(FLOOR_S, FACTOR * self._reference_s))

    def explain(self, limit_s: float) -> str:
        """Why the limit was `limit_s`, for the report of a call that ran past it."""
        if self._reference_s is None or limit_s >= self.ceiling_s:
            return ""
        return (
            f" ({FACTOR:g} x the reference's {self._reference_s:.2g} s on the same call, at least {FLOOR_S:g} s: far"
            " more than a correct solution needs; a loop that never ends?)"
        )

    def wait(self, timeout_s: float) -> None:
        """Let a reference run that is under way finish (its workers are closed by their owner)."""
        if self._thread is not None:
            self._thread.join(timeout_s)
