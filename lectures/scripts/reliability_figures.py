"""Generate the figures of lecture 14-reliability.

    python lectures/scripts/reliability_figures.py [--out DIR]

Writes reliability_failures.png, reliability_goodput.png and reliability_reshard.png into DIR
(default: <repo>/lectures/figures) and prints the numbers the lecture quotes. Deterministic, no
network, a few seconds (checkpoint.py imports torch).

The MTBF, the intervals and the goodput come from the course's own solutions/reliability/
interval.py, the row layout from solutions/reliability/checkpoint.py, so the figures show what
the graded code gives. Llama 3's figures: 419 unexpected interruptions in 54 days on 16,384 GPUs.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.patches import Rectangle

matplotlib.use("Agg")

REPO = Path(__file__).resolve().parents[2]
DPI = 120
DAY_S, HOUR_S = 86400.0, 3600.0
LLAMA3_GPUS = 16384
LLAMA3_GPU_MTBF_S = LLAMA3_GPUS * 54 * DAY_S / 419  # 419 unexpected interruptions in 54 days
CHECKPOINT_S, RESTART_S = 60.0, 600.0  # assumed: Llama 3 does not report them


def save(fig: plt.Figure, path: Path, title: str) -> None:
    """Title the figure, lay it out, write it as a PNG and close it."""
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)


def _solution(name: str):
    sys.path.insert(0, str(REPO))
    sys.path.insert(0, str(REPO / "solutions" / "reliability"))
    return importlib.import_module(name)


def failures(out: Path) -> None:
    """Job MTBF and interruptions a day against the GPU count, at Llama 3's per-GPU rate."""
    interval = _solution("interval")
    gpus = np.array([1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072])
    mtbf_h = np.array([interval.job_mtbf_s(int(g), LLAMA3_GPU_MTBF_S) for g in gpus]) / HOUR_S
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    left.loglog(gpus, mtbf_h, "o-", color="#4c72b0")
    left.set_ylabel("job MTBF (hours)")
    right.loglog(gpus, 24 / mtbf_h, "o-", color="#c44e52")
    right.set_ylabel("interruptions per day")
    for ax in (left, right):
        ax.set_xlabel("GPUs in the job")
        ax.axvline(LLAMA3_GPUS, color="grey", linestyle=":")
        ax.grid(alpha=0.3, which="both")
    left.annotate("Llama 3: 3.1 h", (LLAMA3_GPUS, mtbf_h[4]), textcoords="offset points", xytext=(8, 8), fontsize=8)
    right.annotate("7.8 a day", (LLAMA3_GPUS, 24 / mtbf_h[4]), textcoords="offset points", xytext=(8, -14), fontsize=8)
    save(fig, out / "reliability_failures.png", "Failures add up: one GPU MTBF of 5.8 years, jobs of 1k to 128k GPUs")
    for g, m in zip(gpus, mtbf_h):
        print(f"failures: {g:>6} GPUs: job MTBF {m:6.2f} h, {24 / m:6.2f} interruptions a day")


def goodput(out: Path) -> None:
    """Goodput against the checkpoint interval at Llama 3's MTBF, for three checkpoint times."""
    interval = _solution("interval")
    mtbf = interval.job_mtbf_s(LLAMA3_GPUS, LLAMA3_GPU_MTBF_S)
    taus = np.geomspace(30, 20000, 400)
    fig, ax = plt.subplots(figsize=(8, 4.2))
    for delta, colour in ((10.0, "#55a868"), (60.0, "#4c72b0"), (300.0, "#c44e52")):
        values = [interval.goodput(LLAMA3_GPUS, LLAMA3_GPU_MTBF_S, delta, RESTART_S, t) for t in taus]
        ax.semilogx(taus / 60, values, color=colour, label=f"checkpoint of {delta:g} s")
        for method, marker in (("young", "o"), ("daly", "x")):
            tau = interval.optimal_checkpoint_interval(delta, mtbf, method)
            best = interval.goodput(LLAMA3_GPUS, LLAMA3_GPU_MTBF_S, delta, RESTART_S, tau)
            ax.plot(tau / 60, best, marker, color=colour, markersize=7)
            print(f"goodput: delta {delta:>5g} s, {method:>5}: interval {tau:7.0f} s, goodput {best:.3f}")
    ax.axhline(0.9, color="grey", linestyle=":")
    ax.set_xlabel("compute between checkpoints (minutes)")
    ax.set_ylabel("goodput (useful fraction of time)")
    ax.set_ylim(0.5, 1.0)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8, title="o Young, x Daly", title_fontsize=8)
    save(fig, out / "reliability_goodput.png", "16,384 GPUs, job MTBF 3.1 h, restarts of 10 min: goodput (Daly 2006)")


def reshard(out: Path) -> None:
    """The rows of a 10-row tensor on 4 ranks (the checkpoint's chunks) and on 3 (the loaders)."""
    shard_rows = _solution("checkpoint").shard_rows
    rows, colours = 10, plt.get_cmap("tab10").colors
    fig, ax = plt.subplots(figsize=(8, 2.8))
    for y, p, label in ((1.2, 4, "saved by 4 ranks:\n__r_0.distcp"), (0.0, 3, "loaded by 3 ranks")):
        for rank in range(p):
            start, stop = shard_rows(rows, p, rank)
            if stop > start:
                ax.add_patch(Rectangle((start, y), stop - start, 0.8, color=colours[rank], alpha=0.6))
                ax.text((start + stop) / 2, y + 0.4, f"rank {rank}\nrows {start}-{stop - 1}", ha="center",
                        va="center", fontsize=8)  # fmt: skip
        ax.text(-0.3, y + 0.4, label, ha="right", va="center", fontsize=8)
    for boundary in range(rows + 1):
        ax.axvline(boundary, color="white", linewidth=0.5)
    ax.set_xlim(-3.5, rows)
    ax.set_ylim(-0.2, 2.1)
    ax.set_xlabel("rows of the tensor (dim 0)")
    ax.set_yticks([])
    save(fig, out / "reliability_reshard.png", "Resharding 4 -> 3: each new rank reads only the chunks under its rows")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "lectures" / "figures")
    out = parser.parse_args().out
    out.mkdir(parents=True, exist_ok=True)
    failures(out)
    goodput(out)
    reshard(out)


if __name__ == "__main__":
    main()
