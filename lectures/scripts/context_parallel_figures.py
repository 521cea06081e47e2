"""Generate the figures of lecture 11-context-parallelism.

    python lectures/scripts/context_parallel_figures.py [--out DIR]

Writes cp_activation_memory.png, cp_ring_work.png and cp_bytes_and_overlap.png into DIR
(default: <repo>/lectures/figures). Deterministic, no network, a few seconds.

The bytes and the overlap threshold come from the course's own solutions/context_parallel/cost.py,
so the figure shows what the graded formulas give.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt
import matplotlib.ticker
import numpy as np

matplotlib.use("Agg")

REPO = Path(__file__).resolve().parents[2]
DPI = 120
# Llama-3-8B-like attention: 32 query heads, 8 kv heads of 128, hidden 4096, bf16.
H_Q, H_KV, D, HIDDEN, BYTES = 32, 8, 128, 4096, 2


def _cost():
    sys.path.insert(0, str(REPO / "solutions" / "context_parallel"))
    return importlib.import_module("cost")


def activation_memory(out: Path) -> None:
    """Activations of one layer (Korthikanti et al.'s 34 s b h bytes with FlashAttention,
    no recomputation) against sequence length, whole and split over CP ranks."""
    s = np.logspace(np.log2(4096), np.log2(1 << 20), 40, base=2)
    per_layer = 34 * s * HIDDEN  # bytes, b = 1, bf16, FlashAttention (no s^2 term)
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    for cp in (1, 2, 8, 32):
        ax.plot(s, 32 * per_layer / cp / 2**30, label=f"CP = {cp}")
    ax.axhline(80, color="gray", linestyle="--")
    ax.text(5000, 90, "80 GB of one H100", color="gray", fontsize=8)
    ax.set(xscale="log", yscale="log", xlabel="sequence length s (tokens)", ylabel="GiB per GPU (32 layers)")
    ax.set_title("Activations of a 32-layer, h = 4096 model, b = 1, bf16", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "cp_activation_memory.png", dpi=DPI)
    plt.close(fig)


def _positions(rank: int, p: int, s_local: int, layout: str) -> np.ndarray:
    if layout == "contiguous":
        return np.arange(rank * s_local, (rank + 1) * s_local)
    c = s_local // 2
    return np.concatenate([np.arange(rank * c, (rank + 1) * c), np.arange((2 * p - 1 - rank) * c, (2 * p - rank) * c)])


def ring_work(out: Path) -> None:
    """Visible (query, key) pairs per rank and ring step under a causal mask, p = 4."""
    p, s_local = 4, 8
    fig, axes = plt.subplots(1, 2, figsize=(8.4, 3.4))
    for ax, layout in zip(axes, ("contiguous", "zigzag")):
        grid = np.zeros((p, p))
        for rank in range(p):
            for step in range(p):
                qp, kp = _positions(rank, p, s_local, layout), _positions((rank - step) % p, p, s_local, layout)
                grid[rank, step] = (kp[None, :] <= qp[:, None]).sum()
        ax.imshow(grid, cmap="viridis", vmin=0, vmax=s_local**2)
        for (r, t), n in np.ndenumerate(grid):
            ax.text(t, r, int(n), ha="center", va="center", color="white", fontsize=9)
        ax.set_xticks(range(p))
        ax.set_yticks(range(p))
        totals = ", ".join(str(int(x)) for x in grid.sum(1))
        ax.set(xlabel="ring step", ylabel="rank", title=f"{layout}: per rank {totals}")
    fig.suptitle("Causal mask, p = 4, s_local = 8: visible (query, key) pairs of each step's block", fontsize=10)
    fig.tight_layout()
    fig.savefig(out / "cp_ring_work.png", dpi=DPI)
    plt.close(fig)


def bytes_and_overlap(out: Path) -> None:
    cost = _cost()
    s = 131072
    ps = [2, 4, 8, 16, 32]
    fig, (left, right) = plt.subplots(1, 2, figsize=(9.6, 3.6))
    for variant in ("ring", "ulysses", "allgather_kv"):
        total = [sum(cost.cp_comm_bytes(variant, s, 1, H_Q, H_KV, D, p, BYTES)) / 2**20 for p in ps]
        left.plot(ps, total, "o-", label=variant)
    left.set(xscale="log", yscale="log", xlabel="CP ranks p", ylabel="MiB per rank per layer (fwd + bwd)")
    left.set_xticks(ps, [str(p) for p in ps])
    left.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    left.set_title(f"s = {s:,}, GQA {H_Q}/{H_KV} heads of {D}, bf16", fontsize=9)
    left.legend(fontsize=8)
    links = {"NVLink 450 GB/s": (1 / 450e9, 2e-6), "InfiniBand 50 GB/s": (1 / 50e9, 8e-6)}
    s_local = np.logspace(2, 5, 60)
    compute = 4 * H_Q * s_local**2 * D / (989e12 * 0.5)
    right.plot(s_local, compute * 1e6, color="black", label="compute of one block (50% of H100 bf16)")
    for (name, (beta, alpha)), color in zip(links.items(), ("tab:green", "tab:red")):
        transfer = alpha + beta * 2 * H_KV * s_local * D * BYTES
        right.plot(s_local, transfer * 1e6, color=color, label=f"send K,V block over {name}")
        threshold = cost.ring_overlap_condition(1, H_Q, H_KV, D, BYTES, 989e12 * 0.5, alpha, beta)
        right.axvline(threshold, color=color, linestyle=":")
    right.set(xscale="log", yscale="log", xlabel="s_local (tokens per rank)", ylabel="µs per ring step")
    right.set_title("the ring hides its transfer right of the dotted line", fontsize=9)
    right.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "cp_bytes_and_overlap.png", dpi=DPI)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "lectures" / "figures")
    out = parser.parse_args().out
    out.mkdir(parents=True, exist_ok=True)
    activation_memory(out)
    ring_work(out)
    bytes_and_overlap(out)


if __name__ == "__main__":
    main()
