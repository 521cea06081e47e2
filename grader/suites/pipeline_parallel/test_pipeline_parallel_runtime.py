"""Hidden suite: run_schedule on real worlds of 1, 2 and 4 gloo ranks, driven by the given
train_pipeline. Each world runs many cases in one call (a script of steps), since every world
costs process starts: p = 2 runs the four reference schedules with m = p, 2p and one m that p
does not divide (the interleaved schedule's one round of 3), single- and two-tensor
stages, float64 and float32; p = 4 one case of each schedule; p = 1 (the first stage is the
last) GPipe, 1F1B and zero-bubble. Groups of 3 and 2 ranks in a world of 5 are in
test_pipeline_parallel_groups.py.

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
from grader.suites.pipeline_parallel.reference import microbatch_grads, one_process_grads, schedule
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
def test_run_schedule_waits_on_every_send_before_returning(submission):
    """Every request send_tensors returned has had wait() called on it when run_schedule
    returns (counted by the given train_pipeline): a tensor whose send was never waited on may
    still be read by gloo after the rank moved on."""
    for cases, p in ((P2_CASES, 2), (P4_CASES, 4)):
        results = run_world(submission, cases, p)
        for index, case in enumerate(cases):
            left = [rank_result["sends_not_waited"] for rank_result in outcome(results, index)]
            assert not any(left), (
                f"{describe(case)}: run_schedule returned with {left} (per rank) of send_tensors' requests never "
                f"waited on: keep each SEND's requests and call wait() on every one before returning"
            )


def weight_gradient_actions(actions: list) -> dict[tuple[int, int], str]:
    """(microbatch, chunk) -> the kind of the action that computes its weight gradient: W when
    the rank's schedule holds W(mb, c) (split backward), else B."""
    split = {(a[1], a[2]) for a in actions if a[0] == "W"}
    return {(a[1], a[2]): "W" if (a[1], a[2]) in split else "B" for a in actions if a[0] == "B"}


def check_gradients_seen(results: list, cases: list[tuple], index: int) -> None:
    """At each forward of a chunk, its parameters' .grad (recorded by the given train_pipeline)
    hold exactly the weight gradients of the microbatches whose W (or unsplit B) already ran on
    that chunk: the per-microbatch gradients are one process's (torch autograd, reference.py)."""
    case = cases[index]
    _, _, m, _, kind, dtype = case
    planned, _, num_layers, seed, inputs, targets = case_data(case)
    per_mb = microbatch_grads(kind, num_layers, seed, inputs, targets, m)
    tol = (1e-9, 1e-12) if dtype == torch.float64 else (1e-4, 1e-6)
    for rank, rank_result in enumerate(outcome(results, index)):
        seen = rank_result["grads_seen"]
        weight_by = weight_gradient_actions(planned[rank])
        done: dict[int, list[int]] = {}  # chunk -> microbatches whose weight gradient ran
        backward_ran: dict[int, list[int]] = {}  # chunk -> microbatches whose B ran
        forwards: dict[int, int] = {}
        for kind_, mb, chunk in planned[rank]:
            if kind_ in ("B", "W"):
                if kind_ == "B":
                    backward_ran.setdefault(chunk, []).append(mb)
                if weight_by[(mb, chunk)] == kind_:
                    done.setdefault(chunk, []).append(mb)
                continue
            if kind_ != "F":
                continue
            k = forwards[chunk] = forwards.get(chunk, -1) + 1
            assert chunk < len(seen) and k < len(seen[chunk]), (
                f"{describe(case)}: rank {rank}'s chunk {chunk} ran {len(seen[chunk]) if chunk < len(seen) else 0} "
                f"forwards, expected one per F of its schedule (F(mb, c) calls chunk c once)"
            )
            for name, got in seen[chunk][k].items():
                want = sum((per_mb[i][name] for i in done.get(chunk, [])), torch.zeros_like(per_mb[0][name]))
                got = torch.zeros_like(want) if got is None else got
                if torch.allclose(got, want, rtol=tol[0], atol=tol[1]):
                    continue
                pending = [i for i in backward_ran.get(chunk, []) if i not in done.get(chunk, [])]
                with_pending = want + sum((per_mb[i][name] for i in pending), torch.zeros_like(want))
                where = f"{describe(case)}: rank {rank}, as F of microbatch {mb} (chunk {chunk}) started, {name}.grad"
                if pending and torch.allclose(got, with_pending, rtol=tol[0], atol=tol[1]):
                    raise AssertionError(
                        f"{where} already held the weight gradient of microbatch(es) {pending}, whose B ran but "
                        f"whose W had not: a B whose W is in the schedule computes the input gradient only "
                        f"(torch.autograd.grad(outputs, inputs, grad_outputs, retain_graph=True)) and leaves "
                        f".grad untouched; its W adds the weight gradient"
                    )
                assert_matches(
                    got,
                    want,
                    f"{where} (expected the sum of the weight gradients of microbatches {done.get(chunk, [])}, "
                    f"those whose W, or unsplit B, ran before it: add each one to .grad in that action)",
                    *tol,
                )


@pytest.mark.points(4)
def test_run_schedule_adds_each_weight_gradient_in_its_w_or_unsplit_b(submission):
    """The split backward: at every forward, the chunk's .grad hold exactly the microbatches
    whose W (split) or B (unsplit) ran, for every schedule on 2 and 4 ranks."""
    for cases, p in ((P2_CASES, 2), (P4_CASES, 4)):
        results = run_world(submission, cases, p)
        for index in range(len(cases)):
            check_gradients_seen(results, cases, index)


@pytest.mark.perf
@pytest.mark.points(3)
def test_run_schedule_keeps_a_split_backwards_graph_until_its_w(submission, record_property):
    """Zero-bubble: each rank's peak of live forwards (counted by the given train_pipeline)
    equals the simulator's, min(p, m): B keeps the graph that W needs, so a B that runs the
    whole backward (and frees the graph) holds fewer."""
    figures, runs = {}, []
    for cases, p in ((P2_CASES, 2), (P4_CASES, 4)):
        results = run_world(submission, cases, p)
        for index, case in enumerate(cases):
            if case[0] != "zero_bubble":
                continue
            peaks = [rank_result["peak_live"] for rank_result in outcome(results, index)]
            bound = simulate(case_data(case)[0]).peak_activations
            figures[describe(case)] = {"peak_live": peaks, "simulator": bound}
            runs.append((case, peaks, bound))
    record_property("zero_bubble_peak_live_per_rank", figures)
    for case, peaks, bound in runs:
        assert peaks == bound, (
            f"{describe(case)}: ranks held at most {peaks} forwards' saved tensors at once; the schedule holds "
            f"{bound} (the simulator): a microbatch's activations live from its F to its W, so B must keep the "
            f"graph (retain_graph=True) and compute the input gradient only, and W frees it"
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


ONE_RANK = [(name, 1, m, 1, "dense", torch.float64) for name, m in (("gpipe", 3), ("1f1b", 2), ("zero_bubble", 3))]


@pytest.mark.points(2)
def test_run_schedule_on_one_rank_whose_only_stage_is_first_and_last(submission):
    """p = 1 (a world of 1, group None): stage 0 takes the microbatches and computes the loss in
    its F, and nothing is sent; GPipe, 1F1B and zero-bubble (B then W on the same rank), one
    call. Gradients against one process (the same computation), and no forward left alive."""
    results = run_world(submission, ONE_RANK, 1)
    for index, case in enumerate(ONE_RANK):
        check_gradients(results, ONE_RANK, index)
        (only,) = outcome(results, index)
        assert only["live_after"] == 0 and only["sends_not_waited"] == 0, (
            f"{describe(case)}: after run_schedule, {only['live_after']} forwards' saved tensors still alive and "
            f"{only['sends_not_waited']} sends not waited on (expected none: one rank sends nothing)"
        )


@pytest.mark.points(1)
def test_run_schedule_refuses_a_schedule_for_another_number_of_ranks(submission):
    inputs = torch.randn(ROWS, WIDTH, dtype=torch.float64)
    step = Step("train_pipeline", ("run_schedule", schedule("gpipe", 3, 2), "dense", 6, SEED, inputs, inputs))
    expect_exception("ValueError", lambda: submission.script_spmd(2, [[step]] * 2))
