"""Hidden suite: fit_scaling_law on the shipped Chinchilla data (Besiroglu et al. 2024's 240
points and all 245), on synthetic data drawn from known parameters, and against the naive
least-squares fit on raw loss; compute_optimal against Chinchilla's 20 tokens per parameter and
a brute-force search; the documented ValueErrors."""

from __future__ import annotations

import math

import pytest
import torch

from grader.models.chinchilla import chinchilla_points
from grader.suites.scaling.reference import (
    CHINCHILLA_BUDGET,
    PUBLISHED_FIT,
    approach_3_fit,
    as_theta,
    brute_force_optimal,
    fit_diagnosis,
    huber_log_objective,
    law,
    least_squares_fit,
    raised,
    runs_from_the_best_starts,
    synthetic_points,
)
from grader.testing import expect_exception, generator

# Tolerance against Besiroglu et al. 2024 (E = 1.82, A = 482.01, B = 2085.43, alpha = 0.3478,
# beta = 0.3658): E within 1 %, alpha and beta within 0.005, A and B within 10 %: A trades
# against alpha and B against beta along flat valleys of the objective (the reference lands at
# A = 478, B = 2143, alpha = 0.3473, beta = 0.3672).
RELATIVE = {"E": 0.01, "A": 0.10, "B": 0.10}
ABSOLUTE = {"alpha": 0.005, "beta": 0.005}


def _misses(fit: dict[str, float], target: dict[str, float], scale: float = 1.0) -> list[str]:
    """The parameters of `fit` outside the tolerances (times `scale`) around `target`."""
    missed = []
    for name, want in target.items():
        got = fit[name]
        ok = (
            abs(got / want - 1) <= scale * RELATIVE[name]
            if name in RELATIVE
            else abs(got - want) <= scale * ABSOLUTE[name]
        )
        if not ok:
            missed.append(f"{name} = {got:.4g} (expected {want:.4g})")
    return missed


@pytest.mark.points(8)
def test_fit_recovers_the_published_parameters_where_least_squares_on_raw_loss_does_not(submission, record_property):
    """The 240 points (five highest losses left out): every parameter within the tolerance of
    the replication's; the least-squares fit on raw loss, computed here, misses beta by more
    than 0.05, and the submission's fit is closer to the published beta than to it."""
    n, d, loss = chinchilla_points()
    fit = submission.function("fit_scaling_law")(n, d, loss)
    record_property("fit", {k: round(v, 4) for k, v in fit.items()})
    naive = least_squares_fit(n, d, loss)
    record_property("least_squares_fit", {k: round(v, 4) for k, v in naive.items()})
    assert abs(naive["beta"] - PUBLISHED_FIT["beta"]) > 0.05, "the least-squares reference is no longer a foil"
    closer_to_naive = abs(fit["beta"] - naive["beta"]) < abs(fit["beta"] - PUBLISHED_FIT["beta"])
    assert not closer_to_naive, (
        f"your fit (beta = {fit['beta']:.4f}) lands near the least-squares fit on raw loss (beta = "
        f"{naive['beta']:.4f}), not near Chinchilla's approach 3 ({PUBLISHED_FIT['beta']}): "
        f"{fit_diagnosis(fit, n, d, loss)}"
    )
    missed = _misses(fit, PUBLISHED_FIT)
    assert not missed, (
        f"on the 240 points of the Chinchilla data, {', '.join(missed)}; Besiroglu et al. 2024 report "
        f"{PUBLISHED_FIT}. Tolerances: E 1 %, A and B 10 %, alpha and beta 0.005. {fit_diagnosis(fit, n, d, loss)}"
    )


@pytest.mark.points(4)
def test_fit_on_all_245_points_finds_the_other_optimum(submission):
    """With the five outliers kept, the same objective's best optimum has beta near 0.45 (0.453
    for the reference): a fit that stops in the first valley it finds stays near 0.37."""
    n, d, loss = chinchilla_points(drop_outliers=False)
    fit = submission.function("fit_scaling_law")(n, d, loss)
    assert abs(fit["beta"] - 0.453) < 0.01, (
        f"on all 245 points your fit has beta = {fit['beta']:.4f}; the lowest objective is at beta = 0.453 "
        f"(E = 1.89, alpha = 0.349): {fit_diagnosis(fit, n, d, loss)}"
    )


def _drawn_truth(gen: torch.Generator) -> dict[str, float]:
    """E in [1.5, 2], A in [200, 800], B in [1000, 4000], alpha and beta in [0.25, 0.45]."""
    u = torch.rand(5, generator=gen, dtype=torch.float64).tolist()
    truth = {"E": 1.5 + 0.5 * u[0], "A": 200 + 600 * u[1], "B": 1000 + 3000 * u[2]}
    return truth | {"alpha": 0.25 + 0.2 * u[3], "beta": 0.25 + 0.2 * u[4]}


def _starts_case() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Synthetic data on which L-BFGS from the best grid point ends in a valley 500 times worse
    than from the second, third and fourth, whatever L-BFGS's tolerances: seed 17 of a search,
    fixed (not drawn from the run's seed) so that the check never depends on the grading's draw."""
    gen = torch.Generator().manual_seed(17)
    return synthetic_points(_drawn_truth(gen), 3e-4, gen)


@pytest.mark.points(3)
def test_fit_runs_from_exactly_the_starts_best_grid_points(submission, record_property):
    """`starts` is honoured: on the fixed synthetic case, runs from the grid's 4 best points end at
    objectives (of approach 3, computed here) of 9e-4, 1.6e-6, 1.6e-6 and 1.6e-6. fit(starts=1)
    must end where the first run ends (within a factor 2: not in the good valley, which more
    starts would find), fit(starts=4) in the good valley (within a factor 2 of the best run)."""
    n, d, loss = _starts_case()
    runs = runs_from_the_best_starts(n, d, loss, 4)
    record_property("objective_of_runs_from_the_best_4", [f"{v:.3g}" for v in runs])
    assert runs[0] > 100 * min(runs), f"the fixed case no longer separates the starts: {runs}"
    fit = submission.function("fit_scaling_law")
    for starts, want in ((1, runs[0]), (4, min(runs))):
        got = huber_log_objective(as_theta(fit(n, d, loss, starts=starts))[None], n, d, loss).item()
        record_property(f"objective_with_{starts}_starts", f"{got:.3g}")
        assert want / 2 <= got <= 2 * want, (
            f"fit_scaling_law(..., starts={starts}) ends at objective {got:.3g}; L-BFGS from the {starts} best "
            f"point(s) of grid_starts() ends at {want:.3g} (the runs from the best 4 end at "
            f"{', '.join(f'{v:.3g}' for v in runs)}): rank the grid by the objective, run from exactly the "
            f"`starts` best and keep the lowest end point"
        )


def _valleys_case() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """12 points of E = 1.7, A = 400, B = 410, alpha = 0.34, beta = 0.28 with 8 % noise, drawn
    from a fixed seed: the runs from the grid's 4 best points end in two valleys whose objectives
    differ by about 1 % (2.29e-4 and 2.27e-4), with parameters far apart (alpha 0.13 against
    0.48)."""
    gen = torch.Generator().manual_seed(24)
    n = torch.exp(torch.rand(12, generator=gen, dtype=torch.float64) * 6 + 16)
    d = torch.exp(torch.rand(12, generator=gen, dtype=torch.float64) * 6 + 20)
    loss = (1.7 + 400 / n**0.34 + 410 / d**0.28) * torch.exp(torch.randn(12, generator=gen, dtype=torch.float64) * 0.08)
    return n, d, loss


@pytest.mark.points(2)
def test_fit_keeps_the_run_that_ends_at_the_lowest_objective(submission, record_property):
    """Of the runs from the `starts` best grid points, the one kept is the one whose end point has
    the lowest objective on (N, D, loss) as given: on this case a run judged on the objective
    with N and D (or D and the loss) swapped keeps the worse valley."""
    n, d, loss = _valleys_case()
    runs = runs_from_the_best_starts(n, d, loss, 4)
    record_property("objective_of_runs_from_the_best_4", [f"{v:.4g}" for v in runs])
    assert max(runs) > 1.005 * min(runs), f"the fixed case no longer ends in two valleys: {runs}"
    got = huber_log_objective(as_theta(submission.function("fit_scaling_law")(n, d, loss))[None], n, d, loss).item()
    assert got <= 1.002 * min(runs), (
        f"fit_scaling_law(..., starts=4) ends at objective {got:.5g}; its runs end at "
        f"{', '.join(f'{v:.5g}' for v in runs)}: keep the end point whose objective, on the points as given, is "
        f"lowest"
    )


def _law_error(fit: dict[str, float], truth: dict[str, float], n: torch.Tensor, d: torch.Tensor) -> float:
    """The largest relative distance of fit's law from the true loss over the points."""
    return (law(fit, n, d) / law(truth, n, d) - 1).abs().max().item()


def _recoverable_draw(gen: torch.Generator, noise: float = 3e-4, tries: int = 20):
    """A drawn truth and its noisy points (synthetic_points) from which the docstring's algorithm
    recovers the truth within the tolerances (_misses, and the law within 0.2 %): the suite's own
    approach_3_fit decides. About 3 draws in 100 are not, and are drawn again: L-BFGS from the
    best 4 grid points ends in a valley hundreds of times worse than the truth's, or the noise
    leaves alpha, beta or B less determined than the tolerances (the fit's objective is lower
    than the truth's). (truth, N, D, loss)."""
    for _ in range(tries):
        truth = _drawn_truth(gen)
        n, d, loss = synthetic_points(truth, noise, gen)
        fit = approach_3_fit(n, d, loss)
        if not _misses(fit, truth) and _law_error(fit, truth, n, d) < 2e-3:
            return truth, n, d, loss
    raise AssertionError(f"the suite drew {tries} truths that approach 3 does not recover: the suite's error")


@pytest.mark.points(6)
def test_fit_recovers_parameters_of_synthetic_data(submission):
    """Parameters drawn per run (E in [1.5, 2], A in [200, 800], B in [1000, 4000], alpha and
    beta in [0.25, 0.45]); 49 points on a log grid, multiplicative noise of 0.03 %: E within 1 %,
    alpha and beta within 0.005, A and B within 10 %, and the fitted law within 0.2 % of the true
    loss at every point. Only draws that the docstring's algorithm recovers are used (drawn again
    otherwise: _recoverable_draw)."""
    fit_scaling_law = submission.function("fit_scaling_law")
    if submission.still_the_stub("fit_scaling_law"):
        fit_scaling_law(*_starts_case())  # says "not implemented" before the suite's own fit runs
    truth, n, d, loss = _recoverable_draw(generator("scaling-synthetic"))  # 1e-3 noise: A off by up to 12 %
    fit = fit_scaling_law(n, d, loss)
    missed = _misses(fit, truth)
    assert not missed, f"synthetic data from {truth} (noise 0.03 %): your fit has {', '.join(missed)}"
    error = _law_error(fit, truth, n, d)
    assert error < 2e-3, f"your fitted law is {error:.2%} away from the true loss at some point (limit 0.2 %)"


@pytest.mark.points(5)
def test_compute_optimal_gives_about_20_tokens_per_parameter_and_matches_brute_force(submission):
    """Published fit at Chinchilla's budget 5.76e23: 18.4 tokens per parameter (15 to 25 accepted:
    Chinchilla trained 70B on 1.4T, 20 per parameter); N* and D* within 0.1 % of an argmin over a
    log grid of 200,001 sizes, at three budgets and for a drawn fit; C = 6 N* D* exactly."""
    optimal = submission.function("compute_optimal")
    n, d = optimal(CHINCHILLA_BUDGET, PUBLISHED_FIT)
    assert 15 <= d / n <= 25, f"at 5.76e23 FLOPs: N* = {n:.3g}, D* = {d:.3g}, {d / n:.1f} tokens per parameter"
    u = torch.rand(2, generator=generator("scaling-optimal"), dtype=torch.float64).tolist()
    drawn = {**PUBLISHED_FIT, "alpha": 0.25 + 0.2 * u[0], "beta": 0.25 + 0.2 * u[1]}
    for fit in (PUBLISHED_FIT, drawn):
        for budget in (1e20, CHINCHILLA_BUDGET, 1e26):
            n, d = optimal(budget, fit)
            want_n, want_d = brute_force_optimal(budget, fit)
            assert math.isclose(n, want_n, rel_tol=1e-3) and math.isclose(d, want_d, rel_tol=1e-3), (
                f"C = {budget:.3g}, fit {fit}: compute_optimal gives N* = {n:.5g}, D* = {d:.5g}; a search over N "
                f"gives {want_n:.5g}, {want_d:.5g}"
            )
            assert math.isclose(6 * n * d, budget, rel_tol=1e-9), f"6 N* D* = {6 * n * d:.5g}, not C = {budget:.5g}"


@pytest.mark.points(3)
def test_fit_and_compute_optimal_reject_bad_input(submission):
    """Lengths that differ, fewer than 5 points, a 2-D tensor, a zero, negative or infinite value,
    starts < 1; C <= 0 and a non-positive A, B, alpha or beta. Values below 1 are positive: a fit
    on them returns."""
    fit, optimal = submission.function("fit_scaling_law"), submission.function("compute_optimal")
    n, d, loss = (t[:6] for t in chinchilla_points())
    bad_points = [
        (n, d[:5], loss),
        (n[:4], d[:4], loss[:4]),
        (n[None], d[None], loss[None]),
        (n, d, torch.cat([loss[:5], torch.zeros(1, dtype=torch.float64)])),
        (-n, d, loss),
        (n, torch.cat([d[:5], torch.full((1,), math.inf, dtype=torch.float64)]), loss),
    ]
    for args in bad_points:
        expect_exception("ValueError", lambda args=args: fit(*args))
    expect_exception("ValueError", lambda: fit(n, d, loss, 0))
    expect_exception("ValueError", lambda: optimal(0.0, PUBLISHED_FIT))
    for name in ("A", "B", "alpha", "beta"):
        error = expect_exception("ValueError", lambda name=name: optimal(1e22, {**PUBLISHED_FIT, name: -1.0}))
        assert name in raised(error), f"compute_optimal with {name} = -1 raised ValueError without naming {name}"
    small = fit(n / 1e9, d / 1e12, loss / 10)  # sizes, tokens and losses below 1 are positive: valid
    assert all(math.isfinite(v) for v in small.values()), f"a fit on values below 1 returned {small}"


@pytest.mark.points(2)
def test_fit_and_compute_optimal_take_every_input_at_the_edge_of_their_domain(submission):
    """The boundaries the docstrings draw, on both sides: exactly 5 points fit; a budget C below
    1 or not a multiple of 6 is valid (equation 4 in closed form, no rounding); A, B, alpha or
    beta of 0 or -0.5 is refused."""
    fit, optimal = submission.function("fit_scaling_law"), submission.function("compute_optimal")
    n, d, loss = (t[:5] for t in chinchilla_points())
    five = fit(n, d, loss, 1)
    assert all(math.isfinite(v) for v in five.values()), f"a fit on exactly 5 points returned {five}"
    alpha, beta = PUBLISHED_FIT["alpha"], PUBLISHED_FIT["beta"]
    g = (alpha * PUBLISHED_FIT["A"] / (beta * PUBLISHED_FIT["B"])) ** (1 / (alpha + beta))
    for budget in (0.5, 100.0):
        want_n = g * (budget / 6) ** (beta / (alpha + beta))
        got_n, got_d = optimal(budget, PUBLISHED_FIT)
        assert math.isclose(got_n, want_n, rel_tol=1e-9) and math.isclose(got_d, budget / (6 * want_n), rel_tol=1e-9), (
            f"compute_optimal({budget}, published fit) = ({got_n:.6g}, {got_d:.6g}), expected "
            f"({want_n:.6g}, {budget / (6 * want_n):.6g}): any C > 0 is valid, divided exactly"
        )
    for name in ("A", "B", "alpha", "beta"):
        for value in (0.0, -0.5):
            error = expect_exception(
                "ValueError", lambda name=name, value=value: optimal(1e22, {**PUBLISHED_FIT, name: value})
            )
            assert name in raised(error), (
                f"compute_optimal with {name} = {value} raised ValueError without naming {name}"
            )
