# Your working copy: replace every `raise NotImplementedError` with your implementation.
# (Generated from the course's reference by `python -m grader sync`.)
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
    raise NotImplementedError("implement fit_scaling_law (lectures/09-scaling-laws-and-cost.md, section 6)")


def compute_optimal(C: float, fit: dict[str, float]) -> tuple[float, float]:
    """(N*, D*): the model size and token count that minimise fit's L(N, D) under the budget
    C = 6 N D, in closed form (Hoffmann et al. 2022, equation 4):

        N* = G (C / 6)^(beta / (alpha + beta)),  D* = (C / 6)^(alpha / (alpha + beta)) / G,
        G = (alpha A / (beta B))^(1 / (alpha + beta)).

    Raises ValueError unless C > 0 and A, B, alpha, beta are positive.
    """
    raise NotImplementedError("implement compute_optimal (lectures/09-scaling-laws-and-cost.md, section 7)")


# (Write any helper functions you need here.)
