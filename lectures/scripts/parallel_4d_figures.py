"""Generate the figures of lecture 12-4d-parallelism.

    python lectures/scripts/parallel_4d_figures.py [--out DIR]

Writes p4d_rank_grid.png, p4d_plans.png and p4d_llama3_breakdown.png into DIR (default:
<repo>/lectures/figures) and prints the best grid of every planned model. Deterministic, no
network, a few seconds.

The groups come from the course's ProcessGrid (grader/models/process_grid.py); the plans, the
memory and the step times from the course's own solutions/parallel_4d/plan.py, so the figures
show what the graded code gives.
"""

from __future__ import annotations

import argparse
import importlib
import math
import sys
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt
import matplotlib.ticker
from matplotlib.patches import Rectangle

matplotlib.use("Agg")

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
from grader.models.process_grid import ProcessGrid  # noqa: E402
from grader.models.transformer_config import TransformerConfig  # noqa: E402

DPI = 120
MODELS = {  # Llama-3-like shapes: gated MLP, 8 KV heads, a vocabulary of 128,256
    "8B": TransformerConfig(32, 4096, 32, 8, 14336, 128256, gated_mlp=True),
    "70B": TransformerConfig(80, 8192, 64, 8, 28672, 128256, gated_mlp=True),
    "405B": TransformerConfig(126, 16384, 128, 8, 53248, 128256, gated_mlp=True),
}
# Meta's H100 clusters as grader/models/data/published_runs.toml has them (mfu and HBM included)
H100 = dict(
    gpus_per_node=8, memory_bytes=80e9, peak_flops=989e12, nvlink_bandwidth=450e9, network_bandwidth=50e9,
    memory_bandwidth=3.35e12, mfu=0.6,
)  # fmt: skip
GLOBAL_BATCH, SEQ = 1024, 8192  # sequences per step, tokens per sequence


def _plan():
    sys.path.insert(0, str(REPO / "solutions" / "parallel_4d"))
    return importlib.import_module("plan")


def rank_grid(out: Path) -> None:
    """16 ranks on two nodes of 8, tp = cp = dp = pp = 2 in order tp-cp-dp-pp: one panel per kind."""
    grid = ProcessGrid(tp=2, cp=2, pp=2, dp=2, order="tp-cp-dp-pp")
    colours = plt.get_cmap("tab10").colors
    fig, axes = plt.subplots(2, 2, figsize=(11, 4.4))
    for ax, kind in zip(axes.flat, ("tp", "cp", "dp-cp", "pp")):
        groups = grid.ranks(kind)
        for index, members in enumerate(groups):
            for rank in members:
                x, y = rank % 8, 1 - rank // 8
                ax.add_patch(Rectangle((x + 0.06, y + 0.08), 0.88, 0.84, color=colours[index % 10], alpha=0.85))
                where = grid.coordinates(rank)
                ax.text(x + 0.5, y + 0.6, str(rank), ha="center", va="center", fontsize=11, weight="bold")
                label = "t{tp} c{cp} d{dp} s{pp}".format(**where)
                ax.text(x + 0.5, y + 0.27, label, ha="center", va="center", fontsize=6.5)
        for node in (0, 1):
            ax.add_patch(Rectangle((0, 1 - node), 8, 1, fill=False, edgecolor="black", linewidth=1.5))
            ax.text(-0.1, 1.5 - node, f"node {node}", ha="right", va="center", fontsize=8)
        ax.set(xlim=(-1.1, 8.05), ylim=(-0.05, 2.05), aspect="equal")
        ax.axis("off")
        size = len(groups[0])
        ax.set_title(f'"{kind}": {len(groups)} groups of {size}, e.g. {groups[0]}', fontsize=9)
    title = "tp = cp = dp = pp = 2, order tp-cp-dp-pp: one colour per group (t, c, d, s: the rank's coordinates)"
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(out / "p4d_rank_grid.png", dpi=DPI)
    plt.close(fig)


def plans(out: Path) -> None:
    """Memory per GPU against predicted step time of every grid plan() lets run, per model."""
    plan = _plan()
    cluster = plan.Cluster(gpus=2048, **H100)
    fig, axes = plt.subplots(1, 3, figsize=(12.6, 3.9), sharey=True)
    for ax, (name, cfg) in zip(axes, MODELS.items()):
        found = plan.plan(cfg, cluster, GLOBAL_BATCH, SEQ)
        points = ax.scatter(
            [p.step_seconds for p in found],
            [p.memory_bytes / 1e9 for p in found],
            c=[math.log2(p.pp) for p in found],
            cmap="viridis",
            vmin=0,
            vmax=7,
            s=14,
        )
        best = found[0]
        ax.scatter([best.step_seconds], [best.memory_bytes / 1e9], marker="*", s=220, color="red", zorder=3)
        ax.annotate(
            f"(tp, cp, pp, dp) = ({best.tp}, {best.cp}, {best.pp}, {best.dp})\n"
            f"{best.step_seconds:.2f} s, {best.memory_bytes / 1e9:.1f} GB",
            (best.step_seconds, best.memory_bytes / 1e9),
            xytext=(18, 60) if best.memory_bytes < 50e9 else (18, -70),
            textcoords="offset points",
            fontsize=8,
            color="red",
            bbox=dict(boxstyle="round", facecolor="white", edgecolor="red"),
            arrowprops=dict(arrowstyle="-", color="red"),
        )
        ax.axhline(cluster.memory_bytes / 1e9, color="gray", linestyle="--")
        ax.set(xscale="log", xlabel="predicted step time (s)", ylim=(0, 88))
        ax.xaxis.set_major_locator(matplotlib.ticker.LogLocator(subs=(1, 2, 5)))
        ax.xaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_title(f"Llama-like {name}: {len(found)} grids fit", fontsize=9)
        print(
            f"{name}: {len(found)} grids fit; best (tp, cp, pp, dp) = ({best.tp}, {best.cp}, {best.pp}, {best.dp}), "
            f"(m, v, r) = ({best.microbatches}, {best.virtual_stages}, {best.recomputed_layers}): "
            f"{best.step_seconds:.3f} s, {best.memory_bytes / 1e9:.2f} GB"
        )
    axes[0].set_ylabel("GB per GPU (first stage)")
    colourbar = fig.colorbar(points, ax=axes, ticks=range(8))
    colourbar.ax.set_yticklabels([str(2**k) for k in range(8)])
    colourbar.set_label("pp")
    fig.suptitle(
        f"2,048 H100s (8 per node), {GLOBAL_BATCH} sequences of {SEQ} tokens: every grid that fits in 80 GB, "
        "each with its fastest schedule",
        fontsize=10,
        y=1.03,
    )
    fig.savefig(out / "p4d_plans.png", dpi=DPI, bbox_inches="tight")
    plt.close(fig)


def _terms(plan, cfg, cluster, chosen) -> dict[str, float]:
    """step_seconds's terms for a Plan's grid and schedule, as the hidden suite's reference states
    them; their sum is checked against step_seconds."""
    from grader.suites.parallel_4d.reference import time_terms

    grid = (chosen.tp, chosen.cp, chosen.pp, chosen.dp)
    schedule = {"microbatches": chosen.microbatches, "virtual_stages": chosen.virtual_stages}
    schedule["recomputed_layers"] = chosen.recomputed_layers
    terms = time_terms(cfg, vars(cluster), *grid, 2048, SEQ, **schedule)
    terms["dp"] = terms.pop("dp (exposed)")
    total = plan.step_seconds(cfg, cluster, *grid, 2048, SEQ, **schedule)
    assert abs(sum(terms.values()) - total) <= 1e-9 * total, (terms, total)
    return terms


def llama3_breakdown(out: Path) -> None:
    """Llama 3 405B on 16,384 H100s, 2,048 sequences of 8,192 tokens: where the predicted step
    time of the paper's grid and of the planner's favourites goes."""
    plan = _plan()
    cfg, batch = MODELS["405B"], 2048
    cluster = plan.Cluster(gpus=16384, **H100)
    found = plan.plan(cfg, cluster, batch, SEQ)
    position = {(p.tp, p.cp, p.pp, p.dp): i for i, p in enumerate(found)}
    grids = {  # the last: the favourite of the planner without interleaving, overlap or efficiency curve
        "Llama 3's grid": found[position[(8, 1, 16, 128)]],
        "planner's best": found[0],
        "many small matmuls": found[position[(8, 16, 64, 2)]],
    }
    colours = {"compute": "#4c72b0", "bubble": "#c44e52", "tp": "#55a868", "cp": "#8172b2", "pp": "#ccb974"}
    colours["dp"] = "#64b5cd"
    fig, ax = plt.subplots(figsize=(8.4, 3.4))
    for row, (name, chosen) in enumerate(grids.items()):
        grid = (chosen.tp, chosen.cp, chosen.pp, chosen.dp)
        terms, left = _terms(plan, cfg, cluster, chosen), 0.0
        for term, value in terms.items():
            ax.barh(row, value, left=left, color=colours[term], label=term if row == 0 else None)
            left += value
        memory = chosen.memory_bytes / 1e9
        rank = f"#{position[grid] + 1} of {len(found)}"
        schedule = f"m {chosen.microbatches}, v {chosen.virtual_stages}, r {chosen.recomputed_layers}"
        ax.text(left + 0.1, row, f"{left:.2f} s, {memory:.1f} GB, {rank} ({schedule})", va="center", fontsize=8)
        print(
            f"405B on 16,384 GPUs, {name} (tp, cp, pp, dp) = {grid}, {schedule}: {left:.2f} s ({rank}), "
            f"{memory:.2f} GB; " + ", ".join(f"{term} {value:.2f} s" for term, value in terms.items())
        )
    labels = [f"{name}\n{(p.tp, p.cp, p.pp, p.dp)}" for name, p in grids.items()]
    ax.set_yticks(range(len(grids)), labels, fontsize=8)
    ax.invert_yaxis()
    ax.set(xlabel="predicted seconds per step", xlim=(0, 10))
    ax.set_title("Llama 3 405B, 16,384 H100s, 2,048 x 8,192 tokens a step: step_seconds's terms per grid", fontsize=9)
    ax.legend(fontsize=7, ncol=6, loc="upper center", bbox_to_anchor=(0.5, -0.28))
    fig.tight_layout()
    fig.savefig(out / "p4d_llama3_breakdown.png", dpi=DPI)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "lectures" / "figures")
    out = parser.parse_args().out
    out.mkdir(parents=True, exist_ok=True)
    rank_grid(out)
    plans(out)
    llama3_breakdown(out)


if __name__ == "__main__":
    main()
