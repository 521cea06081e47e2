"""Hidden suite: step_breakdown on traces built event by event, whose answer the docstring fixes
(nested and overlapping events, communication hidden under compute or not, the events that do
not count), and on real torch.profiler traces of a data-parallel step with and without overlap
(grader.models.step_trace), against the suite's own sweep over the same events."""

from __future__ import annotations

import math
from functools import cache
from itertools import pairwise

import pytest

from grader.models.step_trace import record_step_traces
from grader.testing import expect_exception

KEYS = ("step_s", "compute_s", "communication_s", "exposed_communication_s", "idle_s")


def op(name: str, start: float, end: float, cat: str = "cpu_op", tid: int = 1) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": start, "dur": end - start}


def comm(start: float, end: float, tid: int = 2, name: str = "gloo:all_reduce") -> dict:
    return op(name, start, end, cat="user_annotation", tid=tid)


NOISE = [  # events that never count
    {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "python"}},
    {"ph": "i", "name": "Iteration Start: PyTorch Profiler", "pid": 1, "tid": 1, "ts": -500, "s": "t"},
    {"ph": "s", "cat": "fwdbwd", "name": "fwdbwd", "pid": 1, "tid": 1, "ts": 5, "id": 1},
    op("PyTorch Profiler (0)", -1000, 5000, cat="Trace", tid=0),  # the profiler's own span
    op("forward", -300, 900, cat="user_annotation"),  # a record_function of the user's
]


def sweep(trace: dict) -> dict[str, float]:
    """The suite's own answer: every elementary segment between two event boundaries is compute,
    communication, both or neither."""
    compute, communication = [], []
    for event in trace["traceEvents"]:
        if event.get("ph") != "X":
            continue
        span = (event["ts"], event["ts"] + event["dur"])
        if event["name"].startswith(("gloo:", "nccl:")):
            communication.append(span)
        elif event.get("cat") == "cpu_op" and not event["name"].startswith("c10d::"):
            compute.append(span)
    points = sorted({t for span in compute + communication for t in span})
    totals = dict.fromkeys(KEYS, 0.0)
    for a, b in pairwise(points):
        mid = (a + b) / 2
        c = any(s <= mid < e for s, e in compute)
        m = any(s <= mid < e for s, e in communication)
        totals["compute_s"] += (b - a) * c
        totals["communication_s"] += (b - a) * m
        totals["exposed_communication_s"] += (b - a) * (m and not c)
        totals["idle_s"] += (b - a) * (not c and not m)
    totals["step_s"] = points[-1] - points[0]
    return {key: value * 1e-6 for key, value in totals.items()}


CASES = {
    "compute, then an exposed all-reduce, a gap, compute": (
        [op("aten::mm", 0, 100), comm(100, 150), op("aten::add", 200, 250)], (250, 150, 50, 50, 50)
    ),
    "an all-reduce hidden under compute on another thread": (
        [op("aten::mm", 0, 100), comm(20, 60)], (100, 100, 40, 0, 0)
    ),
    "nested compute counts once": (
        [op("autograd::engine::evaluate_function: AddmmBackward0", 0, 100), op("aten::mm", 10, 20),
         op("aten::mm", 30, 90)], (100, 100, 0, 0, 0)
    ),
    "two collectives at once on two threads count once": (
        [op("aten::mm", 0, 10), comm(10, 60, tid=2), comm(35, 85, tid=3)], (85, 10, 75, 75, 0)
    ),
    "c10d:: operators only hand work over: not compute, and not the step": (
        [op("aten::mm", 0, 50), op("c10d::allreduce_", 50, 52), comm(52, 80), op("c10d::allreduce_", 300, 310)],
        (80, 50, 28, 28, 2)
    ),
    "NCCL's collectives count as communication": (
        [op("aten::mm", 0, 40), comm(30, 70, name="nccl:all_reduce")], (70, 40, 40, 30, 0)
    ),
    "communication only": ([comm(5, 25)], (20, 0, 20, 20, 0)),
}  # fmt: skip


def _check(got: object, want: dict[str, float], what: str) -> None:
    assert isinstance(got, dict) and set(KEYS) <= set(got), f"{what}: expected a dict with {KEYS}, got {got!r}"
    wrong = {k: (got[k], want[k]) for k in KEYS if not math.isclose(got[k], want[k], rel_tol=1e-9, abs_tol=1e-12)}
    assert not wrong, (
        f"{what}: (returned, expected) seconds: {wrong}. Unions of intervals: nested or concurrent events count "
        "once; exposed = communication not covered by compute; idle = covered by neither (step_breakdown's docstring)"
    )


@pytest.mark.points(2)
@pytest.mark.parametrize("case", list(CASES))
def test_a_built_trace_is_broken_down_as_the_docstring_says(submission, case):
    events, microseconds = CASES[case]
    trace = {"traceEvents": NOISE + events, "displayTimeUnit": "ms"}
    want = dict(zip(KEYS, (t * 1e-6 for t in microseconds)))
    assert sweep(trace) == pytest.approx(want), "the suite's sweep disagrees with its own table"
    _check(submission.function("step_breakdown")(trace), want, case)


@cache
def real_traces() -> dict[str, dict]:
    """Recorded once per grading session (a few seconds: a fresh process imports torch)."""
    return record_step_traces()


@pytest.mark.points(3)
@pytest.mark.parametrize("kind", ["overlap", "no_overlap"])
def test_a_real_profiler_trace_is_broken_down_like_the_suites_sweep(submission, kind):
    """torch.profiler's chrome trace of one data-parallel step on 2 gloo ranks: hundreds of
    nested operators on the main thread, each all-reduce on a gloo thread."""
    submission.function("step_breakdown")({"traceEvents": CASES["communication only"][0]})  # a stub stops here
    trace = real_traces()[kind]
    _check(submission.function("step_breakdown")(trace), sweep(trace), f"the real {kind} step trace")


REFUSALS = [
    ([1, 2], "a list, not a trace"),
    ({"events": []}, "no 'traceEvents'"),
    ({"traceEvents": {}}, "'traceEvents' not a list"),
    ({"traceEvents": NOISE}, "no compute and no communication event"),
]


@pytest.mark.points(0.5)
@pytest.mark.parametrize(("trace", "why"), REFUSALS, ids=[why for _, why in REFUSALS])
def test_a_trace_that_is_not_one_raises_value_error(submission, trace, why):
    expect_exception("ValueError", lambda: submission.function("step_breakdown")(trace))
