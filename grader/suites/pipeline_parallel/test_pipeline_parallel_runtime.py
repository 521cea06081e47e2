"""Hidden suite: run_schedule on real worlds of 2 and 4 gloo ranks, driven by the given
train_pipeline. Each world runs many cases in one call (a script of steps), since every world
costs process starts: p = 2 runs the four reference schedules with m = p, 2p and one m that p
does not divide (the interleaved schedule's one round of 3), single- and two-tensor
stages, float64 and float32; p = 4 one case of each schedule.

Checked against torch autograd on the whole model and batch in one process (reference.py): the
gradients; against the simulator: the peak of live saved activations per rank; and by the
kernel's byte count: each activation and each gradient crosses a boundary once."""

from __future__ import annotations

import itertools

import pytest
import torch

from grader.models.pipeline import ScheduleError, simulate
from grader.perf import with_slack
from grader.sandbox import Step, SubmissionError
from grader.suites.pipeline_parallel.reference import one_process_grads, schedule
from grader.testing import assert_matches, expect_exception, generator

WIDTH, ROWS, SEED = 6, 13, 17
NAMES = {"gpipe": "GPipe", "1f1b": "1F1B", "interleaved": "interleaved (v=2)", "zero_bubble": "zero-bubble"}
# (schedule, p, m, v, kind, dtype)
P2_CASES = [
    *[(name, 2, m, 1, "dense", torch.float64) for name in ("gpipe", "1f1b", "zero_bubble") for m in (2, 4, 3)],
    *[("interleaved", 2, m, 2, "dense", torch.float64) for m in (2, 4, 3)],
    *[(name, 2, 3, 1, "two_stream", torch.float64) for name in ("gpipe", "1f1b", "zero_bubble")],
    ("interleaved", 2, 4, 2, "two_stream", torch.float64),
    ("1f1b", 2, 4, 1, "dense", torch.float32),
    ("zero_bubble", 2, 5, 1, "dense", torch.float32),
]
P4_CASES = [
    ("gpipe", 4, 4, 1, "dense", torch.float64),
    ("1f1b", 4, 6, 1, "dense", torch.float64),
    ("interleaved", 4, 8, 2, "two_stream", torch.float64),
    ("zero_bubble", 4, 9, 1, "dense", torch.float64),
]
_RESULTS: dict[tuple[int, int], list[list | SubmissionError]] = {}


def case_data(case: tuple) -> tuple:
    name, p, m, v, kind, dtype = case
    gen = generator("pipeline", *case)
    inputs = torch.randn(ROWS, WIDTH, generator=gen, dtype=torch.float64).to(dtype)
    targets = torch.randn(ROWS, WIDTH, generator=gen, dtype=torch.float64).to(dtype)
    return schedule(name, p, m, v), kind, 2 * p * v, SEED + m, inputs, targets


def run_world(submission, cases: list[tuple], p: int) -> list[list | SubmissionError]:
    """Per case, every rank's train_pipeline result, or the SubmissionError of that case; cached
    per submission. The cases run as one script in one world call; when a step fails, that
    case keeps its error and the cases before and after it run again without it, so a bug that
    hangs one schedule fails only the checks of that schedule."""
    key = (id(submission), p)
    if key not in _RESULTS:
        steps = [Step("train_pipeline", ("run_schedule", *case_data(case))) for case in cases]
        _RESULTS[key] = _run_cases(submission, steps, p)
    return _RESULTS[key]


def _run_cases(submission, steps: list[Step], p: int) -> list[list | SubmissionError]:
    if not steps:
        return []
    try:
        per_rank = submission.script_spmd(p, [steps] * p).steps
    except SubmissionError as error:
        failed = error.step
        if failed is None or not 0 <= failed < len(steps):  # not in a step (importing): every case
            return [error] * len(steps)
        before = _run_cases(submission, steps[:failed], p)
        return [*before, error, *_run_cases(submission, steps[failed + 1 :], p)]
    return [[per_rank[rank][index] for rank in range(p)] for index in range(len(steps))]


def outcome(results: list[list | SubmissionError], index: int) -> list:
    """Every rank's result of case `index`; its failure raised."""
    found = results[index]
    if isinstance(found, SubmissionError):
        raise found
    return found


def describe(case: tuple) -> str:
    name, p, m, _v, kind, dtype = case
    tensors = "two-tensor stages" if kind == "two_stream" else "one-tensor stages"
    return f"{NAMES[name]} on {p} ranks, m={m}, {tensors}, {str(dtype).removeprefix('torch.')}"


def check_gradients(results: list, cases: list[tuple], index: int) -> None:
    case = cases[index]
    _, _, _, _, kind, dtype = case
    _, _, num_layers, seed, inputs, targets = case_data(case)
    expected = one_process_grads(kind, num_layers, seed, inputs, targets)
    got = {}
    for rank_result in outcome(results, index):
        got.update(rank_result["grads"])
    assert got.keys() == expected.keys(), f"{describe(case)}: gradients of {sorted(got)}, expected {sorted(expected)}"
    tol = (1e-9, 1e-12) if dtype == torch.float64 else (1e-4, 1e-6)
    for name, want in expected.items():
        assert got[name] is not None, f"{describe(case)}: {name} has no gradient after run_schedule"
        assert_matches(
            got[name], want, f"{describe(case)}: gradient of {name} (one process on the whole batch expected)", *tol
        )


@pytest.mark.points(4)
@pytest.mark.parametrize("name", list(NAMES))
def test_run_schedule_on_two_ranks_matches_one_process_on_the_whole_batch(submission, name):
    results = run_world(submission, P2_CASES, 2)
    for index, case in enumerate(P2_CASES):
        if case[0] == name:
            check_gradients(results, P2_CASES, index)


@pytest.mark.points(5)
def test_run_schedule_on_four_ranks_matches_one_process_for_every_schedule(submission):
    results = run_world(submission, P4_CASES, 4)
    for index in range(len(P4_CASES)):
        check_gradients(results, P4_CASES, index)


@pytest.mark.perf
@pytest.mark.points(5)
def test_run_schedule_frees_each_activation_when_its_backward_ran(submission, record_property):
    """Live forwards (saved tensors still alive, counted by the given train_pipeline) per rank
    never exceed the simulator's peak for the schedule: m for GPipe, p - rank for 1F1B."""
    figures, runs = {}, []
    for cases, p in ((P2_CASES, 2), (P4_CASES, 4)):
        results = run_world(submission, cases, p)
        for index, case in enumerate(cases):
            ranks = outcome(results, index)
            peaks = [ranks[rank]["peak_live"] for rank in range(p)]
            left = [ranks[rank]["live_after"] for rank in range(p)]
            bound = simulate(case_data(case)[0]).peak_activations
            figures[describe(case)] = {"peak_live": peaks, "bound": bound}
            runs.append((case, peaks, left, bound))
    record_property("peak_live_per_rank", figures)
    for case, peaks, _, bound in runs:
        over = [r for r in range(len(peaks)) if peaks[r] > bound[r]]
        assert not over, (
            f"{describe(case)}: rank {over[0]} held {peaks[over[0]]} forwards' saved tensors at once; the "
            f"schedule needs only {bound[over[0]]}: drop what a backward used as soon as it ran "
            f"(no retain_graph, no references kept)"
        )
    for case, _, left, _ in runs:
        assert not any(left), (
            f"{describe(case)}: after run_schedule returned, ranks still hold {left} forwards' saved tensors: "
            f"free each one once its backward ran (a graph kept with retain_graph=True keeps itself alive)"
        )


@pytest.mark.points(2)
def test_run_schedule_returns_each_action_in_order_with_its_start_and_end(submission):
    results = run_world(submission, P2_CASES, 2)
    for index, case in enumerate(P2_CASES):
        planned = case_data(case)[0]
        ranks = outcome(results, index)
        for rank in range(2):
            timeline = ranks[rank]["timeline"]
            actions = [tuple(entry[0]) for entry in timeline]
            assert actions == [tuple(a) for a in planned[rank]], (
                f"{describe(case)}: rank {rank} returned actions {actions[:6]}..., expected its schedule in order"
            )
            times = [(float(entry[1]), float(entry[2])) for entry in timeline]
            assert all(start <= end for start, end in times), f"{describe(case)}: an action ends before it starts"
            assert all(a[1] <= b[0] for a, b in itertools.pairwise(times)), (
                f"{describe(case)}: rank {rank}'s actions overlap in time: they run one after another"
            )


BYTES_WIDTH, BYTES_ROWS, BYTES_M = 128, 256, 4


@pytest.mark.perf
@pytest.mark.points(5)
def test_run_schedule_sends_each_activation_and_gradient_across_a_boundary_once(submission, device, record_property):
    """Bytes each rank wrote, counted by the kernel (as in collectives), on GPipe over 2 ranks:
    rank 0 sends m activations, rank 1 m gradients, rows x width x 8 bytes in all each."""
    gen = generator("pipeline-bytes")
    inputs = torch.randn(BYTES_ROWS, BYTES_WIDTH, generator=gen, dtype=torch.float64)
    targets = torch.randn(BYTES_ROWS, BYTES_WIDTH, generator=gen, dtype=torch.float64)
    steps = [Step("train_pipeline", ("run_schedule", schedule("gpipe", 2, BYTES_M), "dense", 2, SEED, inputs, targets))]
    result = submission.script_spmd(2, [steps] * 2)
    expected = one_process_grads("dense", 2, SEED, inputs, targets)
    got = {**result.steps[0][0]["grads"], **result.steps[1][0]["grads"]}
    for name, want in expected.items():
        assert_matches(got[name], want, f"gradient of {name} in the measured run", 1e-9, 1e-12)
    if not any(result.bytes_sent) and device == "cuda":
        pytest.skip("no bytes were counted: NCCL moves data where the kernel does not count it")
    payload = BYTES_ROWS * BYTES_WIDTH * 8
    record_property("bytes_sent_per_rank", result.bytes_sent)
    record_property("payload_bytes_per_rank", payload)
    for rank, sent in enumerate(result.bytes_sent):
        what = "activations" if rank == 0 else "gradients"
        assert payload <= sent <= with_slack(payload), (
            f"rank {rank} sent {sent:,} bytes; its {BYTES_M} microbatches' {what} are {payload:,} bytes "
            f"(+ slack: {int(with_slack(payload)):,}): send each one once, and only across its stage boundary"
        )


STUDENT = [
    ("gpipe_schedule", (2, 3)),
    ("one_f_one_b_schedule", (2, 3)),
    ("interleaved_schedule", (2, 2, 2)),
    ("zero_bubble_schedule", (2, 3)),
]


@pytest.mark.points(2)
@pytest.mark.parametrize(("function", "args"), STUDENT, ids=[f for f, _ in STUDENT])
def test_your_schedule_runs_on_real_ranks(submission, function, args):
    """The student's own schedule, run by their run_schedule on 2 ranks. A hang is reported by
    the grader's hang diagnosis (where each rank blocked) with the simulator's account of the
    deadlock (the rank, the microbatch and the call it waits in)."""
    v = args[2] if len(args) == 3 else 1
    gen = generator("pipeline-own", function)
    inputs = torch.randn(ROWS, WIDTH, generator=gen, dtype=torch.float64)
    targets = torch.randn(ROWS, WIDTH, generator=gen, dtype=torch.float64)
    step = Step("train_pipeline", (function, args, "dense", 4 * v, SEED, inputs, targets))
    try:
        result = submission.script_spmd(2, [[step]] * 2)
    except SubmissionError as error:
        if error.kind not in ("timeout", "deadlock"):
            raise
        account = _simulator_account(submission, function, args)
        raise SubmissionError(error.kind, error.function, error.message + account) from None
    expected = one_process_grads("dense", 4 * v, SEED, inputs, targets)
    got = {**result.steps[0][0]["grads"], **result.steps[1][0]["grads"]}
    for name, want in expected.items():
        assert_matches(got[name], want, f"{function}{args}: gradient of {name}", 1e-9, 1e-12)


def _simulator_account(submission, function: str, args: tuple) -> str:
    try:
        simulate(submission.function(function)(*args))
    except ScheduleError as error:
        return f"\nthe simulator replays {function}{args} and finds: {error}"
    except SubmissionError:
        return ""
    return f"\nthe simulator runs {function}{args} to the end: run_schedule blocks where the schedule does not"


@pytest.mark.points(1)
def test_run_schedule_refuses_a_schedule_for_another_number_of_ranks(submission):
    inputs = torch.randn(ROWS, WIDTH, dtype=torch.float64)
    step = Step("train_pipeline", ("run_schedule", schedule("gpipe", 3, 2), "dense", 6, SEED, inputs, inputs))
    expect_exception("ValueError", lambda: submission.script_spmd(2, [[step]] * 2))
