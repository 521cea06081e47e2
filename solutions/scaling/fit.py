"""Fitting a scaling law, and the compute-optimal model size (lecture 09, sections 6 and 7).

Chinchilla's approach 3 (Hoffmann et al. 2022, section 3.3): model the final loss of a model of
N parameters trained on D tokens as

    L(N, D) = E + A / N^alpha + B / D^beta

and fit it on log-loss with a Huber loss (delta = 1e-3), parametrised as A = exp(a), B = exp(b),
E = exp(e), so that

    log L(N, D) = logsumexp(a - alpha log N, b - beta log D, e).

The objective has many local minima and flat valleys: L-BFGS runs from several starting points
and the best end point wins. The replication of Besiroglu et al. (2024) fitted the 240 points of
the paper's figure 4 that are not outliers and found E = 1.82, A = 482.01, B = 2085.43,
alpha = 0.3478, beta = 0.3658.
"""

from __future__ import annotations

import itertools
import math

import torch

HUBER_DELTA = 1e-3
# Starting points (a, b, e, alpha, beta), the grid of Hoffmann et al. and Besiroglu et al.:
# every combination, 6 * 6 * 5 * 5 * 5 = 4500 of them.
GRID = {
    "a": (0.0, 5.0, 10.0, 15.0, 20.0, 25.0),
    "b": (0.0, 5.0, 10.0, 15.0, 20.0, 25.0),
    "e": (-1.0, -0.5, 0.0, 0.5, 1.0),
    "alpha": (0.0, 0.5, 1.0, 1.5, 2.0),
    "beta": (0.0, 0.5, 1.0, 1.5, 2.0),
}


def grid_starts() -> torch.Tensor:
    """Given: every starting point of GRID as a (4500, 5) float64 tensor of (a, b, e, alpha, beta)."""
    return torch.tensor(list(itertools.product(*GRID.values())), dtype=torch.float64)


def fit_scaling_law(N: torch.Tensor, D: torch.Tensor, loss: torch.Tensor, starts: int = 4) -> dict[str, float]:
    """Fit L(N, D) = E + A / N^alpha + B / D^beta to the points (N[i], D[i], loss[i]) by
    Chinchilla's approach 3 and return {"E", "A", "B", "alpha", "beta"}.

    Minimise sum_i Huber_delta(logsumexp(a - alpha log N_i, b - beta log D_i, e) - log loss_i)
    over (a, b, e, alpha, beta), delta = HUBER_DELTA, A = exp(a), B = exp(b), E = exp(e), in
    float64: evaluate the objective at every point of grid_starts(), run torch.optim.LBFGS
    (strong Wolfe line search) from the `starts` best of them, and return the end point with
    the lowest objective. Raises ValueError unless N, D and loss are 1-D, of one length, with
    at least 5 points, all finite and positive, and starts >= 1.
    """
    ### BEGIN SOLUTION
    log_n, log_d, log_loss = _check_points(N, D, loss)
    if starts < 1:
        raise ValueError(f"starts must be at least 1, not {starts}")
    grid = grid_starts()
    with torch.no_grad():
        ranked = _objective(grid, log_n, log_d, log_loss).argsort()[:starts]
    best, best_value = None, math.inf
    for start in grid[ranked]:
        theta, value = _lbfgs(start, log_n, log_d, log_loss)
        if value < best_value:
            best, best_value = theta, value
    a, b, e, alpha, beta = best.tolist()
    return {"E": math.exp(e), "A": math.exp(a), "B": math.exp(b), "alpha": alpha, "beta": beta}
    ### END SOLUTION


def compute_optimal(C: float, fit: dict[str, float]) -> tuple[float, float]:
    """(N*, D*): the model size and token count that minimise fit's L(N, D) under the budget
    C = 6 N D, in closed form (Hoffmann et al. 2022, equation 4):

        N* = G (C / 6)^(beta / (alpha + beta)),  D* = (C / 6)^(alpha / (alpha + beta)) / G,
        G = (alpha A / (beta B))^(1 / (alpha + beta)).

    Raises ValueError unless C > 0 and A, B, alpha, beta are positive.
    """
    ### BEGIN SOLUTION
    if not C > 0:
        raise ValueError(f"C must be positive, not {C!r}")
    for name in ("A", "B", "alpha", "beta"):
        if not fit[name] > 0:
            raise ValueError(f"{name} must be positive, not {fit[name]!r}")
    alpha, beta = fit["alpha"], fit["beta"]
    # d/dN of A N^-alpha + B (C / 6N)^-beta = 0  =>  alpha A N^-alpha = beta B D^-beta.
    g = (alpha * fit["A"] / (beta * fit["B"])) ** (1 / (alpha + beta))
    n_opt = g * (C / 6) ** (beta / (alpha + beta))
    return n_opt, C / (6 * n_opt)
    ### END SOLUTION


### BEGIN SOLUTION
def _check_points(N: torch.Tensor, D: torch.Tensor, loss: torch.Tensor) -> tuple[torch.Tensor, ...]:
    for name, values in (("N", N), ("D", D), ("loss", loss)):
        if not isinstance(values, torch.Tensor) or values.dim() != 1:
            raise ValueError(f"{name} must be a 1-D tensor")
        if values.numel() != N.numel():
            raise ValueError(f"{name} has {values.numel()} points, N has {N.numel()}")
        if not (torch.isfinite(values).all() and (values > 0).all()):
            raise ValueError(f"{name} must be finite and positive")
    if N.numel() < 5:
        raise ValueError(f"a fit of 5 parameters needs at least 5 points, not {N.numel()}")
    return N.double().log(), D.double().log(), loss.double().log()


def _objective(theta: torch.Tensor, log_n: torch.Tensor, log_d: torch.Tensor, log_loss: torch.Tensor) -> torch.Tensor:
    """Sum of Huber losses of the log-residuals, one value per row (a, b, e, alpha, beta) of theta."""
    a, b, e, alpha, beta = (column[:, None] for column in theta.unbind(-1))
    terms = torch.stack([a - alpha * log_n, b - beta * log_d, e.expand(-1, log_n.numel())])
    predicted = torch.logsumexp(terms, dim=0)
    target = log_loss.expand_as(predicted)
    return torch.nn.functional.huber_loss(predicted, target, delta=HUBER_DELTA, reduction="none").sum(-1)


def _lbfgs(start: torch.Tensor, log_n: torch.Tensor, log_d: torch.Tensor, log_loss: torch.Tensor):
    theta = start.clone()[None].requires_grad_(True)
    optimizer = torch.optim.LBFGS(
        [theta], max_iter=1000, tolerance_grad=1e-12, tolerance_change=1e-16, line_search_fn="strong_wolfe"
    )

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        # Divided by delta: residuals beyond delta weigh |r|, and L-BFGS's tolerances see O(1) values.
        value = _objective(theta, log_n, log_d, log_loss).sum() / HUBER_DELTA
        value.backward()
        return value

    optimizer.step(closure)
    with torch.no_grad():
        return theta[0].detach(), _objective(theta, log_n, log_d, log_loss).item()


### END SOLUTION
