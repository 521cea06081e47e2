"""Hidden suite: job_mtbf_s, optimal_checkpoint_interval and goodput against the closed forms of
Young (1974) and Daly (2006), goodput against a simulation of exponential failures (failures
during checkpoints and restarts included), Llama 3's reported interruptions, and the refusals."""

from __future__ import annotations

import math

import numpy as np
import pytest

from grader.sandbox import Step
from grader.testing import RUN_SEED, expect_exception

DAY_S = 86400.0
# Llama 3 (Dubey et al. 2024, section 3.3.4): 466 interruptions in a 54-day snapshot of
# pre-training on 16,384 H100s, 419 of them unexpected.
LLAMA3_GPUS, LLAMA3_DAYS, LLAMA3_UNEXPECTED = 16384, 54, 419


def young(delta: float, m: float) -> float:
    return math.sqrt(2 * delta * m)


def daly(delta: float, m: float) -> float:
    if delta >= 2 * m:
        return m
    x = delta / (2 * m)
    return young(delta, m) * (1 + math.sqrt(x) / 3 + x / 9) - delta


def daly_goodput(m: float, delta: float, restart: float, tau: float) -> float:
    """T_s / T_w with T_w = M e^(R/M) (e^((tau + delta)/M) - 1) T_s / tau."""
    return tau / (m * math.exp(restart / m) * math.expm1((tau + delta) / m))


def simulated_goodput(m: float, delta: float, restart: float, tau: float, segments: int, seed: int) -> float:
    """Work in segments of tau + delta (compute, then checkpoint); a failure (exponential, mean m)
    loses the segment so far and costs a restart of R, which a failure may interrupt too."""
    rng = np.random.default_rng(seed)
    wall, length = 0.0, tau + delta
    for _ in range(segments):
        while True:
            failure = rng.exponential(m)
            if failure >= length:
                wall += length
                break
            wall += failure
            while (failure := rng.exponential(m)) < restart:  # the restart fails too
                wall += failure
            wall += restart
    return segments * tau / wall


@pytest.mark.points(2)
def test_job_mtbf_is_the_gpu_mtbf_over_the_gpu_count(submission):
    # (2, 0.5): an MTBF under a second is still > 0, the docstring's only bound
    cases = [(1, 1e6), (8, 3.6e6), (16384, 1.6e9), (24576, 7.5e8), (3, 10.0), (2, 0.5)]
    got = submission.script([Step("job_mtbf_s", case) for case in cases]).steps[0]
    for (gpus, gpu_mtbf), answer in zip(cases, got):
        assert math.isclose(answer, gpu_mtbf / gpus, rel_tol=1e-12), (
            f"job_mtbf_s({gpus}, {gpu_mtbf}): expected {gpu_mtbf / gpus} s (independent failures add their rates), "
            f"got {answer}"
        )


@pytest.mark.points(2)
def test_llama3s_interruptions_give_a_job_mtbf_of_about_three_hours(submission):
    """419 unexpected interruptions in 54 days: a GPU MTBF of 16,384 x 54 days / 419, and a job
    MTBF of 54 days / 419 = 3.09 h, about 7.8 interruptions a day."""
    gpu_mtbf = LLAMA3_GPUS * LLAMA3_DAYS * DAY_S / LLAMA3_UNEXPECTED
    job = submission.function("job_mtbf_s")(LLAMA3_GPUS, gpu_mtbf)
    assert math.isclose(job, LLAMA3_DAYS * DAY_S / LLAMA3_UNEXPECTED, rel_tol=1e-12), job
    assert math.isclose(DAY_S / job, 419 / 54, rel_tol=1e-12)


CHECKPOINTS = [
    (0.0, 3600.0),
    (1.0, 1e6),
    (30.0, 11135.0),
    (60.0, 11135.0),
    (600.0, 3600.0),
    (500.0, 300.0),
    (7200.0, 3600.0),
    (7199.0, 3600.0),
    (0.01, 0.5),
]  # fmt: skip  (an MTBF under a second is still > 0)


@pytest.mark.points(3)
@pytest.mark.parametrize("method", ["young", "daly"])
def test_optimal_interval_is_the_papers_closed_form(submission, method):
    """Young: sqrt(2 delta M). Daly: his higher-order series below delta = 2M, and M from there on
    (the last two cases sit on either side of delta = 2M)."""
    got = submission.script([Step("optimal_checkpoint_interval", (*case, method)) for case in CHECKPOINTS]).steps[0]
    formula = young if method == "young" else daly
    for (delta, m), answer in zip(CHECKPOINTS, got):
        want = formula(delta, m)
        assert math.isclose(answer, want, rel_tol=1e-9, abs_tol=1e-12), (
            f"optimal_checkpoint_interval({delta}, {m}, {method!r}): expected {want:.6g} s, got {answer!r} "
            f"(interval.py's docstring gives the formula)"
        )


def test_daly_is_the_default_method(submission):
    got = submission.function("optimal_checkpoint_interval")(60.0, 11135.0)
    assert math.isclose(got, daly(60.0, 11135.0)), (
        f"optimal_checkpoint_interval(60.0, 11135.0) without a method: expected Daly's {daly(60.0, 11135.0):.6g} s "
        f"(the default), got {got!r}"
    )


@pytest.mark.points(4)
def test_goodput_is_dalys_expected_useful_fraction(submission):
    cases = [(16384, 1.824e8, 60.0, 600.0, 1100.0), (8, 1e7, 5.0, 30.0, 200.0), (1024, 3.6e9, 0.0, 0.0, 10.0),
             (24576, 1e8, 300.0, 1800.0, 3000.0), (2, 100.0, 1.0, 2.0, 50.0),
             (4, 40.0, 0.25, 0.5, 0.5)]  # fmt: skip - the last: every duration under a second, all valid
    got = submission.script([Step("goodput", case) for case in cases]).steps[0]
    for (gpus, gpu_mtbf, delta, restart, tau), answer in zip(cases, got):
        want = daly_goodput(gpu_mtbf / gpus, delta, restart, tau)
        assert math.isclose(answer, want, rel_tol=1e-9), (
            f"goodput({gpus}, {gpu_mtbf}, {delta}, {restart}, {tau}): expected {want:.6f}, got {answer!r}: "
            "tau / (M e^(R/M) (e^((tau + delta)/M) - 1)) with M = gpu_mtbf_s / gpus"
        )


def test_goodput_without_failures_is_the_share_of_compute(submission):
    answer = submission.function("goodput")(1, 1e15, 10.0, 100.0, 90.0)
    assert math.isclose(answer, 0.9, rel_tol=1e-6), (
        f"with almost no failures expected tau / (tau + delta) = 0.9, got {answer}"
    )


@pytest.mark.points(2)
@pytest.mark.parametrize(("m", "delta", "restart", "tau"), [(1000.0, 20.0, 50.0, 200.0), (300.0, 30.0, 100.0, 150.0)])
def test_goodput_matches_a_simulation_of_exponential_failures(submission, m, delta, restart, tau):
    """20,000 segments with failures drawn at random (the run's seed): within 2% of goodput."""
    answer = submission.function("goodput")(4, 4 * m, delta, restart, tau)
    simulated = simulated_goodput(m, delta, restart, tau, 20000, RUN_SEED)
    assert math.isclose(answer, simulated, rel_tol=0.02), (
        f"goodput for M = {m} s, delta = {delta} s, R = {restart} s, tau = {tau} s: {answer:.4f}, but a simulation of "
        f"exponential failures gives {simulated:.4f} (failures can strike during checkpoints and restarts too)"
    )


def test_dalys_interval_is_near_the_best_goodput(submission):
    """On Llama 3's MTBF with 60 s checkpoints and 10 min restarts, no interval on a fine grid
    does better than Daly's by more than 0.1% of goodput."""
    m, delta, restart = LLAMA3_DAYS * DAY_S / LLAMA3_UNEXPECTED, 60.0, 600.0
    tau = submission.function("optimal_checkpoint_interval")(delta, m)
    best = max(daly_goodput(m, delta, restart, t) for t in np.linspace(100, 5000, 4901))
    assert daly_goodput(m, delta, restart, tau) >= best - 1e-3, (tau, best)


BAD = [
    ("job_mtbf_s", (0, 1e6), "no GPU"),
    ("job_mtbf_s", (2.5, 1e6), "a fractional GPU count"),
    ("job_mtbf_s", (8.0, 1e6), "a GPU count as a float, though whole"),
    ("job_mtbf_s", (True, 1e6), "a bool GPU count"),
    ("job_mtbf_s", (8, 0.0), "an MTBF of 0"),
    ("job_mtbf_s", (8, -5.0), "a negative MTBF"),
    ("optimal_checkpoint_interval", (60.0, -1.0), "a negative MTBF"),
    ("optimal_checkpoint_interval", (60.0, 0.0), "an MTBF of 0"),
    ("optimal_checkpoint_interval", (-1.0, 100.0), "a negative checkpoint time"),
    ("optimal_checkpoint_interval", (60.0, 100.0, "chandy"), "an unknown method"),
    ("goodput", (8, -1.0, 60.0, 60.0, 600.0), "a negative GPU MTBF"),
    ("goodput", (8, 1e6, -1.0, 60.0, 600.0), "a negative checkpoint time"),
    ("goodput", (8, 1e6, 60.0, -1.0, 600.0), "a negative restart time"),
    ("goodput", (8, 1e6, 60.0, 60.0, 0.0), "an interval of 0"),
    ("goodput", (0, 1e6, 60.0, 60.0, 600.0), "no GPU"),
    ("goodput", (8.0, 1e6, 60.0, 60.0, 600.0), "a GPU count as a float, though whole"),
]


@pytest.mark.points(0.25)
@pytest.mark.parametrize(("name", "args", "why"), BAD, ids=[f"{name}-{why}" for name, _, why in BAD])
def test_bad_intervals_raise_value_error(submission, name, args, why):
    expect_exception("ValueError", lambda: submission.function(name)(*args))
