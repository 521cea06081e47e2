"""Hidden suite: the four schedules, replayed by the course's simulator (grader.models.pipeline)
in the grader's process. The student's functions only build the lists (all the cases of a test
in one call); every figure is counted by the simulator, the same on every machine: validity (no
deadlock, no action before its input, every action once), the bubble fraction against the
closed forms of lecture 08, and the peak of held activations per rank."""

from __future__ import annotations

from fractions import Fraction

import pytest

from grader.models.pipeline import ScheduleError, Simulation, simulate
from grader.sandbox import Step
from grader.suites.pipeline_parallel.reference import schedule as reference_schedule
from grader.testing import expect_exception

SIZES = [(1, 1), (1, 3), (2, 1), (2, 2), (2, 5), (3, 2), (3, 7), (4, 4), (4, 8), (4, 6), (5, 11), (8, 16)]
SIZES += [(4, 2), (5, 1), (8, 3)]  # m < p - 1: fewer microbatches than warm-up forwards
INTERLEAVED = [(1, 3, 2), (2, 2, 2), (2, 6, 3), (3, 6, 2), (4, 4, 2), (4, 8, 2), (4, 8, 3), (4, 12, 4), (8, 16, 2)]
# p does not divide m: one round of 3, 4 or 6, or two rounds of 5 (torch's ScheduleInterleaved1F1B)
UNEVEN = [(2, 3, 2), (3, 4, 2), (4, 6, 2), (4, 10, 2), (4, 7, 3)]


def build(submission, function: str, cases: list[tuple[int, ...]]) -> list:
    """The student's schedules for every case, built in one call."""
    return submission.script([Step(function, case) for case in cases]).steps[0]


def replay(schedule, what: str, **costs) -> Simulation:
    try:
        return simulate(schedule, **costs)
    except ScheduleError as error:
        raise AssertionError(f"{what}: the simulator refuses the schedule: {error}") from None


def check_shape(schedule, p: int, what: str) -> None:
    assert isinstance(schedule, list) and len(schedule) == p, f"{what}: expected a list of {p} lists (one per rank)"
    for rank, actions in enumerate(schedule):
        assert isinstance(actions, list), f"{what}: rank {rank}'s actions are a {type(actions).__name__}, not a list"
        bad = [a for a in actions if not (isinstance(a, tuple) and len(a) == 3)]
        assert not bad, f"{what}: rank {rank} has {bad[0]!r}; an action is a tuple (kind, microbatch, chunk)"


@pytest.mark.perf
@pytest.mark.points(4)
def test_gpipe_schedule_is_valid_with_bubble_p_minus_1_over_m_plus_p_minus_1_and_m_activations(submission):
    for (p, m), schedule in zip(SIZES, build(submission, "gpipe_schedule", SIZES)):
        what = f"gpipe_schedule({p}, {m})"
        check_shape(schedule, p, what)
        result = replay(schedule, what)
        assert result.bubble_fraction == Fraction(p - 1, m + p - 1), (
            f"{what}: bubble fraction {result.bubble_fraction} (F = 1, unsplit B = 2), expected (p-1)/(m+p-1) = "
            f"{Fraction(p - 1, m + p - 1)}: run every forward, then every backward, each in microbatch order"
        )
        assert result.peak_activations == [m] * p, (
            f"{what}: peak activations held per rank {result.peak_activations}, expected {[m] * p} (all of them)"
        )
        assert all(a[0] != "W" for actions in schedule for a in actions), f"{what}: GPipe does not split B and W"


@pytest.mark.perf
@pytest.mark.points(5)
def test_one_f_one_b_schedule_has_gpipes_bubble_holding_at_most_p_minus_rank_activations(submission):
    for (p, m), schedule in zip(SIZES, build(submission, "one_f_one_b_schedule", SIZES)):
        what = f"one_f_one_b_schedule({p}, {m})"
        check_shape(schedule, p, what)
        result = replay(schedule, what)
        assert result.bubble_fraction == Fraction(p - 1, m + p - 1), (
            f"{what}: bubble fraction {result.bubble_fraction}, expected (p-1)/(m+p-1) = {Fraction(p - 1, m + p - 1)} "
            f"(a schedule that sends microbatches through the pipe one at a time idles (p-1)/p of the time)"
        )
        bound = [min(p - r, m) for r in range(p)]
        over = [r for r in range(p) if result.peak_activations[r] > bound[r]]
        assert not over, (
            f"{what}: rank {over[0]} holds {result.peak_activations[over[0]]} microbatches' activations at its "
            f"peak; 1F1B holds at most min(p - rank, m) = {bound[over[0]]}: start each backward as soon as "
            f"the warm-up forwards ran, not after every forward"
        )


@pytest.mark.perf
@pytest.mark.points(5)
def test_interleaved_schedule_cuts_the_bubble_to_p_minus_1_over_vm_plus_p_minus_1(submission):
    for (p, m, v), schedule in zip(
        INTERLEAVED + UNEVEN, build(submission, "interleaved_schedule", INTERLEAVED + UNEVEN)
    ):
        what = f"interleaved_schedule({p}, {m}, {v})"
        check_shape(schedule, p, what)
        result = replay(schedule, what)
        chunks = {a[2] for actions in schedule for a in actions}
        assert chunks == set(range(v)), f"{what}: the actions use chunks {sorted(chunks)}, expected 0..{v - 1}"
        expected = Fraction(p - 1, v * m + p - 1)
        assert result.bubble_fraction == expected, (
            f"{what}: bubble fraction {result.bubble_fraction} (each chunk costs 1/v), expected (p-1)/(v*m+p-1) "
            f"= {expected}, about 1/v of 1F1B's {Fraction(p - 1, m + p - 1)}"
        )


@pytest.mark.perf
@pytest.mark.points(3)
def test_interleaved_schedule_holds_2_p_minus_r_minus_1_plus_v_minus_1_b_plus_1_chunks_at_its_peak(submission):
    """The simulator's peak of held (microbatch, chunk) activations per rank against the
    docstring's min(2(p-r-1) + (v-1)b + 1, m*v), rounds of b = m / max(1, m // p): lecture 08's
    11, 9, 7, 5 at p = 4, m = 8, v = 2, and rounds larger than p."""
    cases = [(4, 8, 2), *INTERLEAVED, *UNEVEN, (4, 2, 2), (8, 3, 2)]
    for (p, m, v), schedule in zip(cases, build(submission, "interleaved_schedule", cases)):
        what = f"interleaved_schedule({p}, {m}, {v})"
        check_shape(schedule, p, what)
        b = m // max(1, m // p)
        expected = [min(2 * (p - r - 1) + (v - 1) * b + 1, m * v) for r in range(p)]
        got = replay(schedule, what).peak_activations
        assert got == expected, (
            f"{what}: peak activations per rank {got} (chunks), expected min(2(p-r-1) + (v-1)b + 1, m*v) = "
            f"{expected} with rounds of b = {b}: rank r warms up with 2(p-r-1) + (v-1)b forwards, then "
            f"alternates one forward and one backward"
        )


ZERO_BUBBLE = [(2, 5), (2, 2), (3, 3), (3, 7), (4, 4), (4, 8), (4, 9), (8, 16)]


@pytest.mark.perf
@pytest.mark.points(6)
def test_zero_bubble_schedule_beats_one_f_one_b_at_its_peak_memory_and_meets_the_paper_bound(submission):
    """ZB-H1 against the reference 1F1B (F = B = W = 1; 1F1B's unsplit B costs 2) in the simulator."""
    for (p, m), schedule in zip(ZERO_BUBBLE, build(submission, "zero_bubble_schedule", ZERO_BUBBLE)):
        what = f"zero_bubble_schedule({p}, {m})"
        check_shape(schedule, p, what)
        result = replay(schedule, what)
        one_f_one_b = simulate(reference_schedule("1f1b", p, m))
        weights = sum(a[0] == "W" for actions in schedule for a in actions)
        assert weights == m * p, f"{what}: {weights} W actions, expected one per microbatch and rank ({m * p})"
        assert max(result.peak_activations) <= max(one_f_one_b.peak_activations), (
            f"{what}: peak activations {result.peak_activations}; 1F1B's peak is {max(one_f_one_b.peak_activations)}: "
            f"run the oldest pending W before a forward that would hold more"
        )
        assert result.makespan < one_f_one_b.makespan, (
            f"{what}: makespan {result.makespan}, not below 1F1B's {one_f_one_b.makespan}: W must fill idle time"
        )
        bound = m * 3 + (p - 1) * (1 + 1 - 1)
        if m >= p:
            assert result.makespan <= bound, (
                f"{what}: makespan {result.makespan} above the ZB-H1 bound m(F+B+W) + (p-1)(F+B-W) = {bound}"
            )


@pytest.mark.points(2)
def test_schedules_run_with_message_latency_doing_3m_units_of_work_per_rank(submission):
    """With a message latency of 1/2, every schedule still runs and every rank computes the same work."""
    p, m = 3, 6
    steps = [
        Step("gpipe_schedule", (p, m)),
        Step("one_f_one_b_schedule", (p, m)),
        Step("interleaved_schedule", (p, m, 2)),
        Step("zero_bubble_schedule", (p, m)),
    ]
    names = ["gpipe_schedule", "one_f_one_b_schedule", "interleaved_schedule", "zero_bubble_schedule"]
    for name, schedule in zip(names, submission.script(steps).steps[0]):
        result = replay(schedule, f"{name} with latency 1/2", latency=0.5)
        assert result.busy == [Fraction(3 * m)] * p, f"{name}: busy time per rank {result.busy}, expected {3 * m}"
        assert result.makespan >= 3 * m + Fraction(p - 1, 2), f"{name}: makespan {result.makespan} ignores latency"


BAD = [
    ("gpipe_schedule", (0, 4)),
    ("gpipe_schedule", (2, 0)),
    ("one_f_one_b_schedule", (0, 4)),
    ("one_f_one_b_schedule", (2, -1)),
    ("interleaved_schedule", (2, 4, 0)),
    ("interleaved_schedule", (0, 4, 2)),
    ("interleaved_schedule", (2, 0, 2)),
    ("interleaved_schedule", (2, 5, 2)),  # rounds of 2 and 3: max(1, m // p) = 2 does not divide 5
    ("interleaved_schedule", (4, 9, 2)),
    ("zero_bubble_schedule", (0, 3)),
    ("zero_bubble_schedule", (3, 0)),
    ("gpipe_schedule", (2.0, 4)),
]


@pytest.mark.points(2)
@pytest.mark.parametrize(("function", "args"), BAD, ids=[f"{f}{a}" for f, a in BAD])
def test_schedules_refuse_bad_sizes_with_value_error(submission, function, args):
    expect_exception("ValueError", lambda: submission.function(function)(*args))


ORDERS = [
    ("gpipe_schedule", "gpipe", (3, 5)),
    ("one_f_one_b_schedule", "1f1b", (3, 5)),
    ("one_f_one_b_schedule", "1f1b", (4, 2)),
    ("interleaved_schedule", "interleaved", (2, 4, 3)),
    ("zero_bubble_schedule", "zero_bubble", (3, 5)),
    ("zero_bubble_schedule", "zero_bubble", (4, 3)),
    ("zero_bubble_schedule", "zero_bubble", (4, 8)),
]


@pytest.mark.points(3)
@pytest.mark.parametrize(("function", "name", "args"), ORDERS, ids=[f"{f}{a}" for f, _, a in ORDERS])
def test_schedules_follow_the_order_their_docstring_gives(submission, function, name, args):
    """Each rank's list, action by action, against the reference schedule of the same rule."""
    got = submission.function(function)(*args)
    expected = reference_schedule(name, *args)
    check_shape(got, args[0], f"{function}{args}")
    for rank, (mine, theirs) in enumerate(zip(got, expected)):
        mine = [tuple(a) for a in mine]
        first = next((i for i, (a, b) in enumerate(zip(mine, theirs)) if a != b), min(len(mine), len(theirs)))
        assert mine == theirs, (
            f"{function}{args}: rank {rank}'s action {first} is "
            f"{mine[first] if first < len(mine) else 'missing'}, expected "
            f"{theirs[first] if first < len(theirs) else 'nothing more'} "
            f"(the actions before it: {mine[max(0, first - 4) : first]})"
        )


TORCH_ORDERS = [(2, 4, 2), (4, 8, 2), (2, 3, 2), (4, 3, 2), (4, 6, 2), (4, 10, 2), (3, 8, 3)]


@pytest.mark.points(3)
def test_interleaved_schedule_orders_f_and_b_as_torch_pipelinings_interleaved_1f1b(submission):
    """Each rank's F and B, in order, against torch.distributed.pipelining's
    ScheduleInterleaved1F1B, with p dividing m and not (rounds of max(1, m // p)). Its order is
    the reference's (reference.py), which tests/test_pipeline_parallel_checks.py proves equal to
    torch's own for these cases: importing torch.distributed.pipelining here would cost seconds
    of every grading."""
    for (p, m, v), schedule in zip(TORCH_ORDERS, build(submission, "interleaved_schedule", TORCH_ORDERS)):
        what = f"interleaved_schedule({p}, {m}, {v})"
        check_shape(schedule, p, what)
        size = m // max(1, m // p)
        torch_order = [
            [a for a in actions if a[0] in ("F", "B")] for actions in reference_schedule("interleaved", p, m, v)
        ]
        for rank, expected in enumerate(torch_order):
            got = [tuple(a) for a in schedule[rank] if a[0] in ("F", "B")]
            first = next((i for i, (g, e) in enumerate(zip(got, expected)) if g != e), min(len(got), len(expected)))
            warmup = min(2 * (p - rank - 1) + (v - 1) * size, m * v)
            assert got == expected, (
                f"{what}: rank {rank}'s F and B differ from torch's ScheduleInterleaved1F1B at computation {first}: "
                f"got {got[first : first + 3]}, torch runs {expected[first : first + 3]} (rounds of "
                f"b = m / max(1, m // p) = {size} microbatches, {warmup} warm-up forwards)"
            )
