"""The Chinchilla figure-4 points that module scaling fits (given data, read data/README.md).

    from grader.models.chinchilla import chinchilla_points
    N, D, loss = chinchilla_points()                   # the 240 points the replication fitted
    N, D, loss = chinchilla_points(drop_outliers=False)  # all 245

245 points (model size N, training compute C, final loss) of figure 4 of Hoffmann et al. (2022),
"Training compute-optimal large language models", as extracted from the figure's SVG by
Besiroglu, Erdil, Barnett and You (2024), "Chinchilla scaling: a replication attempt" (Epoch AI).
Training tokens are D = C / (6 N). The replication left out the five points with the highest
loss and fitted the other 240.
"""

from __future__ import annotations

import csv
from pathlib import Path

import torch

DATA = Path(__file__).parent / "data" / "chinchilla_figure4_points.csv"
OUTLIERS = 5


def chinchilla_points(drop_outliers: bool = True) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(N, D, loss) as float64 tensors, D = C / (6 N); without the five highest losses when
    drop_outliers, in the file's order otherwise."""
    with open(DATA, newline="") as file:
        rows = list(csv.DictReader(file))
    n, flops, loss = (
        torch.tensor([float(row[column]) for row in rows], dtype=torch.float64)
        for column in ("Model Size", "Training FLOP", "loss")
    )
    keep = loss.argsort()[: len(rows) - OUTLIERS] if drop_outliers else torch.arange(len(rows))
    return n[keep], (flops / (6 * n))[keep], loss[keep]
