"""Generate the figures of lecture 02-data-parallel-and-zero.

    python lectures/scripts/zero_figures.py [--out DIR]

Writes zero_memory_per_rank.png, zero_ddp_overlap.png and zero_checkpointing.png into DIR
(default: <repo>/lectures/figures). Deterministic, no network, a few seconds.

The memory curves come from the course's own solutions/zero/memory.py, so the figure shows what
the graded formula gives.
"""

from __future__ import annotations

import argparse
import importlib
import math
import sys
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt

matplotlib.use("Agg")

REPO = Path(__file__).resolve().parents[2]
DPI = 120
STAGE_NAMES = ["DDP (stage 0)", "ZeRO-1: optimizer", "ZeRO-2: + gradients", "ZeRO-3: + parameters"]


def _memory():
    sys.path.insert(0, str(REPO / "solutions" / "zero"))
    return importlib.import_module("memory").zero_memory_per_rank


def memory_per_rank(out: Path) -> None:
    """Model-state GB per rank for a 7.5B model, mixed-precision Adam, by stage and world size."""
    zero_memory_per_rank = _memory()
    worlds = [1, 2, 4, 8, 16, 32, 64, 128]
    fig, ax = plt.subplots(figsize=(7, 4))
    for stage, name in enumerate(STAGE_NAMES):
        ax.plot(worlds, [zero_memory_per_rank(7.5e9, p, stage) / 1e9 for p in worlds], "o-", label=name)
    ax.axhline(80, color="gray", ls=":", label="one 80 GB GPU")
    ax.set(xscale="log", yscale="log", xlabel="data-parallel ranks p", ylabel="model states per rank (GB)")
    ax.set_xticks(worlds, [str(p) for p in worlds])
    ax.set_title("7.5B parameters, mixed-precision Adam (16 bytes/parameter)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "zero_memory_per_rank.png", dpi=DPI)
    plt.close(fig)


def ddp_overlap(out: Path) -> None:
    """Timeline: backward of 4 buckets with the all-reduce after backward, and overlapped."""
    backward, comm = 1.0, 0.8  # per bucket, arbitrary units
    fig, axes = plt.subplots(2, 1, figsize=(8, 3.2), sharex=True)
    for ax, overlapped in zip(axes, (False, True)):
        end = 0.0
        for b in range(4):
            start = b * backward
            ax.broken_barh([(start, backward)], (1, 0.8), color="tab:blue")
            ax.text(start + backward / 2, 1.4, f"grad bucket {b}", ha="center", va="center", fontsize=7, color="w")
            comm_start = max(end, (b + 1) * backward if overlapped else 4 * backward)
            ax.broken_barh([(comm_start, comm)], (0, 0.8), color="tab:orange")
            ax.text(comm_start + comm / 2, 0.4, f"allreduce {b}", ha="center", va="center", fontsize=7)
            end = comm_start + comm
        ax.set_yticks([0.4, 1.4], ["network", "compute"])
        ax.set_title(
            f"{'overlapped: each bucket starts when ready' if overlapped else 'after backward'}: "
            f"step ends at {end:.1f}",
            fontsize=9,
        )
    axes[-1].set_xlabel("time (one bucket's backward = 1)")
    fig.tight_layout()
    fig.savefig(out / "zero_ddp_overlap.png", dpi=DPI)
    plt.close(fig)


def checkpointing(out: Path) -> None:
    """Activations kept (in block outputs) against segments, for n = 64 blocks."""
    n = 64
    segments = list(range(1, n + 1))
    peak = [s + math.ceil(n / s) for s in segments]  # boundaries + one segment recomputed
    fig, ax = plt.subplots(figsize=(7, 3.6))
    ax.plot(segments, peak, label="boundaries + one segment in backward: s + n/s")
    ax.axhline(n, color="gray", ls=":", label="no checkpointing: n")
    best = round(math.sqrt(n))
    ax.plot([best], [best + math.ceil(n / best)], "o", color="tab:red", label=f"s = sqrt(n) = {best}")
    ax.set(xscale="log", xlabel="segments s", ylabel="activations held (block outputs)")
    ax.set_title(f"{n} blocks: checkpointing costs one extra forward")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "zero_checkpointing.png", dpi=DPI)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=REPO / "lectures" / "figures")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    memory_per_rank(args.out)
    ddp_overlap(args.out)
    checkpointing(args.out)
    print(f"wrote figures to {args.out}")


if __name__ == "__main__":
    main()
