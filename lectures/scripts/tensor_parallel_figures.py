"""Generate the figures of lecture 07-tensor-parallelism.

    python lectures/scripts/tensor_parallel_figures.py [--out DIR]

Writes tp_column_row.png, tp_activation_memory.png and tp_nvlink_vs_infiniband.png into DIR
(default: <repo>/lectures/figures). Deterministic, no network, a few seconds.

The memory curves come from the course's own solutions/tensor_parallel/memory.py, so the figure
shows what the graded formula gives; the communication times use the alpha-beta model of lecture
1 with the link figures written below.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt
import matplotlib.ticker
from matplotlib.patches import Rectangle

matplotlib.use("Agg")

REPO = Path(__file__).resolve().parents[2]
DPI = 120
GPT3 = {"s": 2048, "b": 1, "h": 12288, "a": 96}  # GPT-3 175B, the paper's second configuration
# Per-GPU bandwidth one way, and latency: H100 NVLink 4 (900 GB/s both ways) inside a node, one
# 400 Gb/s NDR InfiniBand port per GPU between nodes.
LINKS = {"NVLink (inside a node)": (450e9, 2e-6), "InfiniBand NDR (between nodes)": (50e9, 8e-6)}
PEAK_FLOPS = 989e12 * 0.5  # bf16 dense peak of an H100 at 50% utilisation


def _activation_bytes():
    sys.path.insert(0, str(REPO / "solutions" / "tensor_parallel"))
    return importlib.import_module("memory").tp_activation_bytes


def column_row(out: Path) -> None:
    """The MLP on 2 ranks: A split by columns, B by rows; f before, g after."""
    fig, ax = plt.subplots(figsize=(8, 3.2))
    colors = ["tab:blue", "tab:orange"]

    def box(x, y, w, h, color, text, alpha=0.35):
        ax.add_patch(Rectangle((x, y), w, h, facecolor=color, edgecolor="black", alpha=alpha))
        ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=9)

    box(0.0, 1.0, 0.8, 1.6, "lightgray", "X\n(s·b, h)\nwhole", 0.6)
    ax.text(1.05, 1.8, "f", fontsize=14, ha="center", va="center", color="darkred")
    for r in range(2):
        y = 2.0 - 1.2 * r
        box(1.4, y, 0.6, 0.9, colors[r], f"A$_{r}$\n(h, 4h/2)")
        box(2.3, y, 0.7, 0.9, colors[r], f"GeLU(X A$_{r}$)")
        box(3.3, y, 0.6, 0.9, colors[r], f"B$_{r}$\n(4h/2, h)")
        box(4.2, y, 0.8, 0.9, colors[r], f"partial\nZ$_{r}$ (s·b, h)")
    ax.text(5.3, 1.8, "g", fontsize=14, ha="center", va="center", color="darkred")
    box(5.6, 1.0, 0.9, 1.6, "lightgray", "Z = Z$_0$ + Z$_1$\nwhole", 0.6)
    ax.text(
        3.25,
        0.35,
        "f: identity forward, all-reduce backward    g: all-reduce forward, identity backward\n"
        "no communication between the column layer (A) and the row layer (B)",
        ha="center",
        fontsize=8.5,
    )
    ax.set(xlim=(-0.1, 6.6), ylim=(0.0, 3.0))
    ax.axis("off")
    ax.set_title("Tensor-parallel MLP on 2 ranks: column-parallel A, row-parallel B")
    fig.tight_layout()
    fig.savefig(out / "tp_column_row.png", dpi=DPI)
    plt.close(fig)


def activation_memory(out: Path) -> None:
    """GB of activations per layer and rank for GPT-3 175B, by t, four recipes."""
    tp_activation_bytes = _activation_bytes()
    sizes = [1, 2, 4, 8]
    recipes = {
        "TP": (False, False),
        "TP + selective recompute": (False, True),
        "TP + SP": (True, False),
        "TP + SP + selective recompute": (True, True),
    }
    fig, ax = plt.subplots(figsize=(7, 4))
    for name, flags in recipes.items():
        gib = [
            tp_activation_bytes(**GPT3, t=t, sequence_parallel=flags[0], selective_recompute=flags[1]) / 2**30
            for t in sizes
        ]
        ax.plot(sizes, gib, "o-", label=name)
    ax.set(xscale="log", yscale="log", xlabel="tensor-parallel size t", ylabel="activations per layer and rank (GiB)")
    ax.set_xticks(sizes, [str(t) for t in sizes])
    ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    ax.set_title("GPT-3 175B (s=2048, b=1, h=12288, a=96), 2-byte activations")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "tp_activation_memory.png", dpi=DPI)
    plt.close(fig)


def nvlink_vs_infiniband(out: Path) -> None:
    """Time of one layer's four all-reduces (alpha-beta, ring) against its compute, by t."""
    s, b, h = GPT3["s"], GPT3["b"], GPT3["h"]
    message = 2 * s * b * h  # bytes of one all-reduce (bf16)
    sizes = [2, 4, 8, 16, 32, 64]
    flops = 3 * (24 * b * s * h * h + 4 * b * s * s * h)  # forward + backward of one layer
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(sizes, [flops / t / PEAK_FLOPS * 1e3 for t in sizes], "k--", label="compute per rank")
    for name, (bandwidth, alpha) in LINKS.items():
        times = [4 * (2 * (t - 1) * alpha + 2 * (t - 1) / t * message / bandwidth) * 1e3 for t in sizes]
        ax.plot(sizes, times, "o-", label=f"4 all-reduces over {name}")
    ax.axvline(8, color="gray", ls=":")
    ax.text(8.4, 15, "8 GPUs:\none node", color="gray", fontsize=8)
    ax.set(xscale="log", yscale="log", xlabel="tensor-parallel size t", ylabel="ms per layer (forward + backward)")
    ax.set_xticks(sizes, [str(t) for t in sizes])
    ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    ax.set_title("GPT-3 175B layer: TP communication against compute")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "tp_nvlink_vs_infiniband.png", dpi=DPI)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "lectures" / "figures")
    out = parser.parse_args().out
    out.mkdir(parents=True, exist_ok=True)
    column_row(out)
    activation_memory(out)
    nvlink_vs_infiniband(out)


if __name__ == "__main__":
    main()
