"""Generate the figures of lecture 01-collectives.

    python lectures/scripts/collectives_figures.py [--out DIR]

Writes collectives_ring_steps.png, collectives_alpha_beta.png and collectives_bytes_per_rank.png
into DIR (default: <repo>/lectures/figures). Deterministic, no network.

The cost curves come from the course's own `allreduce_time` (solutions/collectives/cost_model.py)
rather than from formulas re-typed here, so the figures cannot drift away from the code that the
exercises are graded against.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path
from types import ModuleType

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.patches import Rectangle

# Headless and deterministic. pyplot picks its backend lazily, so this still takes effect.
matplotlib.use("Agg")

REPO = Path(__file__).resolve().parents[2]


def _load_cost_model() -> ModuleType:
    """Import the course's cost model from solutions/collectives (not an installed package)."""
    sys.path.insert(0, str(REPO / "solutions" / "collectives"))
    return importlib.import_module("cost_model")


_cost_model = _load_cost_model()
ALGORITHMS: tuple[str, ...] = _cost_model.ALGORITHMS
allreduce_time = _cost_model.allreduce_time

DPI = 120
KIB, GIB = 2**10, 2**30

# Illustrative link parameters (estimates, see lecture section 6), in seconds and seconds/byte.
NVLINK_LIKE = {"alpha": 2e-6, "beta": 1 / 400e9}  # ~2 us per message, 400 GB/s one way
IB_LIKE = {"alpha": 5e-6, "beta": 1 / 50e9}  # ~5 us per message, 400 Gb/s NDR = 50 GB/s one way

LABELS = {
    "ring": "ring",
    "recursive_doubling": "recursive doubling",
    "rabenseifner": "Rabenseifner (halving + doubling)",
}
COLORS = {"ring": "tab:blue", "recursive_doubling": "tab:orange", "rabenseifner": "tab:green"}

# ---------------------------------------------------------------------------------------------
# Ring schedule (the chunk-r-on-rank-r convention of lecture section 2)
# ---------------------------------------------------------------------------------------------

Holdings = list[list[frozenset[int]]]  # holdings[rank][chunk] = ranks whose inputs are summed in


def rs_send_chunk(rank: int, step: int, p: int) -> int:
    """Chunk that `rank` sends to rank+1 at reduce-scatter step `step`.

    Shifted by one from the textbook (r - s) so that rank r finishes with chunk r, the layout of
    dist.reduce_scatter_tensor and of the course's ring_reduce_scatter.
    """
    return (rank - step - 1) % p


def ag_send_chunk(rank: int, step: int, p: int) -> int:
    """Chunk that `rank` sends to rank+1 at all-gather step `step`: it starts with its own chunk."""
    return (rank - step) % p


def ring_phases(p: int) -> list[tuple[str, Holdings, list[int | None]]]:
    """Simulate ring allreduce on p ranks, symbolically.

    Returns (title, holdings at the start of the step, chunk each rank sends or None) for each
    of the 2(p-1) steps, plus the states after reduce-scatter and after all-gather.
    """
    hold: Holdings = [[frozenset({r}) for _ in range(p)] for r in range(p)]
    phases: list[tuple[str, Holdings, list[int | None]]] = []
    for step in range(p - 1):
        sends = [rs_send_chunk(r, step, p) for r in range(p)]
        phases.append((f"reduce-scatter, step s={step}", hold, sends))
        # Every rank sends from the state *before* the step: all p messages are in flight at once.
        new = [row[:] for row in hold]
        for r, c in enumerate(sends):
            new[(r + 1) % p][c] = hold[(r + 1) % p][c] | hold[r][c]
        hold = new
    assert all(hold[r][r] == frozenset(range(p)) for r in range(p)), "rank r must own chunk r"
    phases.append(("after reduce-scatter", hold, [None] * p))
    for step in range(p - 1):
        sends = [ag_send_chunk(r, step, p) for r in range(p)]
        phases.append((f"all-gather, step s={step}", hold, sends))
        new = [row[:] for row in hold]
        for r, c in enumerate(sends):
            new[(r + 1) % p][c] = hold[r][c]  # a copy, not a sum: every rank gets identical bits
        hold = new
    assert all(h == frozenset(range(p)) for row in hold for h in row)
    phases.append(("after all-gather", hold, [None] * p))
    return phases


def ring_elements_sent(p: int, n: int) -> list[int]:
    """Elements each rank sends in ring allreduce of n elements split by tensor_split(p)."""
    sizes = [len(chunk) for chunk in np.array_split(np.arange(n), p)]  # same sizes as tensor_split
    sent = [0] * p
    for step in range(p - 1):
        for r in range(p):
            sent[r] += sizes[rs_send_chunk(r, step, p)] + sizes[ag_send_chunk(r, step, p)]
    return sent


# ---------------------------------------------------------------------------------------------
# Figure 1: ring steps
# ---------------------------------------------------------------------------------------------


def cell_text(members: frozenset[int], p: int) -> str:
    return "Σ all" if len(members) == p else "+".join(str(m) for m in sorted(members))


def draw_phase(ax: Axes, title: str, hold: Holdings, sends: list[int | None], p: int) -> None:
    """One panel: rows are ranks, columns chunks; outlined cells are the ones being sent."""
    cmap = plt.get_cmap("Blues")
    for r in range(p):
        for c in range(p):
            k = len(hold[r][c])
            full = k == p
            face = "#4caf50" if full else cmap(0.15 + 0.55 * (k - 1) / max(p - 1, 1))
            y = p - 1 - r  # rank 0 on top
            ax.add_patch(Rectangle((c, y), 1, 1, facecolor=face, edgecolor="white", lw=1.5))
            ax.text(
                c + 0.5,
                y + 0.5,
                cell_text(hold[r][c], p),
                ha="center",
                va="center",
                fontsize=8.5,
                color="white" if full or k >= 3 else "black",
            )
        if sends[r] is not None:
            c, y = sends[r], p - 1 - r
            ax.add_patch(Rectangle((c + 0.04, y + 0.04), 0.92, 0.92, fill=False, edgecolor="#d62728", lw=2.5))
            ax.text(
                p + 0.1,
                y + 0.5,
                f"c{c} → rank {(r + 1) % p}",
                va="center",
                fontsize=8.5,
                color="#d62728",
            )
    ax.set_xlim(0, p + 1.6)
    ax.set_ylim(0, p)
    ax.set_xticks([c + 0.5 for c in range(p)], [f"c{c}" for c in range(p)], fontsize=9)
    ax.set_yticks([p - 1 - r + 0.5 for r in range(p)], [f"rank {r}" for r in range(p)], fontsize=9)
    ax.tick_params(length=0)
    for side in ("top", "right", "bottom", "left"):
        ax.spines[side].set_visible(False)
    ax.set_title(title, fontsize=10.5)


def fig_ring_steps(out: Path, p: int = 4) -> Path:
    phases = ring_phases(p)
    ncols = p  # p-1 steps + the state after the phase
    fig, axes = plt.subplots(2, ncols, figsize=(4.1 * ncols, 8.6))
    for ax, (title, hold, sends) in zip(axes.flat, phases, strict=True):
        draw_phase(ax, title, hold, sends, p)
    fig.suptitle(
        f"Ring allreduce on {p} ranks = reduce-scatter ({p - 1} steps) + all-gather "
        f"({p - 1} steps)\nAt every step each rank r sends the outlined chunk to rank r+1 "
        f"(mod {p}) and receives one from rank r-1.  Reduce-scatter sends c(r-s-1) mod {p} "
        f"(receiver adds it); all-gather sends c(r-s) mod {p} (receiver copies it).",
        fontsize=11,
    )
    fig.text(
        0.5,
        0.015,
        "Cell (rank r, chunk c): whose inputs rank r's copy of chunk c contains.  "
        "Green = complete sum.  After reduce-scatter rank r owns the sum of chunk r.",
        ha="center",
        fontsize=10,
    )
    fig.tight_layout(rect=(0, 0.03, 1, 0.95))
    path = out / "collectives_ring_steps.png"
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


# ---------------------------------------------------------------------------------------------
# Figure 2: alpha-beta predictions
# ---------------------------------------------------------------------------------------------


def predicted_times(p: int, sizes: np.ndarray, alpha: float, beta: float) -> dict[str, np.ndarray]:
    return {algo: np.array([allreduce_time(algo, p, float(n), alpha, beta) for n in sizes]) for algo in ALGORITHMS}


def size_label(nbytes: float) -> str:
    for unit, scale in (("GiB", GIB), ("MiB", 2**20), ("KiB", KIB)):
        if nbytes >= scale:
            return f"{nbytes / scale:g} {unit}"
    return f"{nbytes:g} B"


def crossover(a: str, b: str, p: int, alpha: float, beta: float) -> float | None:
    """Message size where algorithms a and b cost the same, by bisection on log2(size)."""

    def diff(log2n: float) -> float:
        n = 2.0**log2n
        return allreduce_time(a, p, n, alpha, beta) - allreduce_time(b, p, n, alpha, beta)

    lo, hi = 0.0, 40.0
    if diff(lo) * diff(hi) > 0:
        return None
    for _ in range(100):
        mid = (lo + hi) / 2
        if diff(lo) * diff(mid) <= 0:
            hi = mid
        else:
            lo = mid
    return 2.0 ** ((lo + hi) / 2)


def draw_cost_panel(ax: Axes, p: int, params: dict[str, float], name: str) -> None:
    sizes = np.logspace(10, 30, 161, base=2.0)  # 1 KiB .. 1 GiB
    alpha, beta = params["alpha"], params["beta"]
    for algo, t in predicted_times(p, sizes, alpha, beta).items():
        ax.loglog(sizes, t * 1e6, label=LABELS[algo], color=COLORS[algo], lw=2)
    n_star = crossover("recursive_doubling", "rabenseifner", p, alpha, beta)
    if n_star is not None:
        ax.axvline(n_star, color="gray", ls=":", lw=1.2)
        # Bottom of the panel, right of the line: the curves are all higher there.
        ax.text(
            n_star * 1.2,
            ax.get_ylim()[0] * 1.15,
            f"RD = Rabenseifner at\nn ≈ {n_star / KIB:.0f} KiB",
            fontsize=8.5,
            color="dimgray",
            va="bottom",
        )
    ticks = [2.0**k for k in range(10, 31, 4)]
    ax.set_xticks(ticks, [size_label(t) for t in ticks])
    ax.set_xlabel("message size n (bytes per rank)")
    ax.set_ylabel("predicted allreduce time (µs)")
    ax.set_title(
        f"p = {p}, {name}: $\\alpha$ = {alpha * 1e6:g} µs, 1/$\\beta$ = {1 / beta / 1e9:g} GB/s",
        fontsize=10.5,
    )
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=9, loc="upper left")


def fig_alpha_beta(out: Path) -> Path:
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5.2))
    draw_cost_panel(left, 8, NVLINK_LIKE, "NVLink-like")
    draw_cost_panel(right, 1024, IB_LIKE, "InfiniBand-like")
    fig.suptitle(
        r"$\alpha$-$\beta$ model of allreduce (allreduce_time from the course's cost_model.py); "
        "parameters are illustrative estimates",
        fontsize=11,
    )
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    path = out / "collectives_alpha_beta.png"
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


# ---------------------------------------------------------------------------------------------
# Figure 3: bytes sent per rank
# ---------------------------------------------------------------------------------------------


def fig_bytes_per_rank(out: Path) -> Path:
    ps = np.arange(2, 65)
    ring = []
    for p in (int(q) for q in ps):
        n = p * 1000  # divisible by p: with uneven chunks the busiest rank sends < 2 extra elements
        sent = ring_elements_sent(p, n)
        assert sent == [2 * (p - 1) * 1000] * p
        # The ring's beta term in the cost model is exactly its bytes sent per rank.
        assert np.isclose(allreduce_time("ring", p, n, 0.0, 1.0), max(sent))
        ring.append(max(sent) / n)
    bound = 2 * (ps - 1) / ps
    fig, ax = plt.subplots(figsize=(7.5, 5))
    ax.semilogy(ps, ps - 1, color="tab:red", lw=2, label="gather to root + broadcast: root sends (p-1)·N")
    ax.semilogy(
        ps,
        np.ones_like(ps, dtype=float),
        color="tab:red",
        lw=1,
        ls="--",
        label="gather to root + broadcast: other ranks send N",
    )
    ax.semilogy(ps, bound, color="black", lw=2, label="lower bound 2(p-1)/p·N")
    ax.semilogy(ps, ring, "o", ms=4, color="tab:blue", label="ring (counted from the simulated schedule)")
    yticks = [1, 1.5, 2, 5, 10, 20, 50]
    ax.set_yticks(yticks, [f"{t:g}" for t in yticks])
    ax.minorticks_off()
    ax.set_xlabel("number of ranks p")
    ax.set_ylabel("bytes sent by one rank / N  (log scale)")
    ax.set_title("Bytes each rank sends in one allreduce of N bytes", fontsize=11)
    ax.set_xlim(0, 66)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=9, loc="upper left")
    fig.tight_layout()
    path = out / "collectives_bytes_per_rank.png"
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out",
        type=Path,
        default=REPO / "lectures" / "figures",
        help="output directory (default: <repo>/lectures/figures)",
    )
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for path in (fig_ring_steps(args.out), fig_alpha_beta(args.out), fig_bytes_per_rank(args.out)):
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
