"""Generate the figures of lecture 08-pipeline-parallelism.

    python lectures/scripts/pipeline_parallel_figures.py [--out DIR]

Writes pipeline_timelines.png, pipeline_bubble.png and pipeline_memory.png into DIR (default:
<repo>/lectures/figures). Deterministic, no network, a few seconds.

Every figure comes from the course's simulator (grader/models/pipeline.py) replaying the
schedules of solutions/pipeline_parallel/schedules.py: the figures show what the graded code gives.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt
from matplotlib.patches import Patch

matplotlib.use("Agg")

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
from grader.models.pipeline import simulate  # noqa: E402

DPI = 120
COLOURS = {"F": "#4c72b0", "B": "#dd8452", "W": "#55a868"}
P, M = 4, 8


def _schedules():
    sys.path.insert(0, str(REPO / "solutions" / "pipeline_parallel"))
    module = importlib.import_module("schedules")
    return {
        "GPipe": module.gpipe_schedule(P, M),
        "1F1B": module.one_f_one_b_schedule(P, M),
        "interleaved, v = 2": module.interleaved_schedule(P, M, 2),
        "zero bubble (ZB-H1)": module.zero_bubble_schedule(P, M),
    }


def draw_timeline(ax, result, title: str) -> None:
    """Ranks top to bottom, time left to right, one box per F/B/W labelled with its microbatch."""
    for rank, (kind, mb, chunk), start, end in result.events:
        shade = 0.55 if chunk % 2 else 1.0
        ax.barh(rank, float(end - start), left=float(start), color=COLOURS[kind], alpha=shade, edgecolor="white")
        ax.text(float(start + end) / 2, rank, str(mb), ha="center", va="center", fontsize=6, color="white")
    ax.set_yticks(range(len(result.busy)), [f"rank {r}" for r in range(len(result.busy))])
    ax.invert_yaxis()
    ax.set_xlim(0, 34)
    figures = f"makespan {float(result.makespan):g}, bubble {float(result.bubble_fraction):.0%}"
    ax.set_title(f"{title}: {figures}", fontsize=9)


def timelines(out: Path) -> None:
    schedules = _schedules()
    fig, axes = plt.subplots(len(schedules), 1, figsize=(9, 7), sharex=True)
    for ax, (name, schedule) in zip(axes, schedules.items()):
        draw_timeline(ax, simulate(schedule), name)
    axes[-1].set_xlabel("time (F = B = W = 1; an unsplit backward costs 2; a chunk costs 1/v)")
    handles = [Patch(color=c, label=k) for k, c in COLOURS.items()]
    fig.legend(handles=handles, loc="upper right", ncols=3, fontsize=8)
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    fig.savefig(out / "pipeline_timelines.png", dpi=DPI)
    plt.close(fig)


def bubble(out: Path) -> None:
    sys.path.insert(0, str(REPO / "solutions" / "pipeline_parallel"))
    module = importlib.import_module("schedules")
    ms = [4, 8, 12, 16, 24, 32]
    curves = {
        "GPipe and 1F1B": lambda m: module.one_f_one_b_schedule(P, m),
        "interleaved, v = 2": lambda m: module.interleaved_schedule(P, m, 2),
        "interleaved, v = 4": lambda m: module.interleaved_schedule(P, m, 4),
        "zero bubble (ZB-H1)": lambda m: module.zero_bubble_schedule(P, m),
    }
    fig, ax = plt.subplots(figsize=(7, 4))
    for name, build in curves.items():
        ax.plot(ms, [float(simulate(build(m)).bubble_fraction) for m in ms], "o-", label=name)
    ax.set(xlabel="microbatches m", ylabel="bubble fraction (idle / total)", ylim=(0, None))
    ax.set_title(f"p = {P} stages, from the simulator", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "pipeline_bubble.png", dpi=DPI)
    plt.close(fig)


def memory(out: Path) -> None:
    schedules = _schedules()
    fig, ax = plt.subplots(figsize=(7, 3.5))
    width = 0.2
    for i, (name, schedule) in enumerate(schedules.items()):
        result = simulate(schedule)
        chunks = 1 + max(a[2] for actions in schedule for a in actions)
        held = [n / chunks for n in result.peak_activations]  # in whole stages' microbatches
        ax.bar([r + (i - 1.5) * width for r in range(P)], held, width, label=name)
    ax.set_xticks(range(P), [f"rank {r}" for r in range(P)])
    ax.set(ylabel="peak activations held\n(microbatches of a whole stage)")
    ax.set_title(f"p = {P}, m = {M}", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "pipeline_memory.png", dpi=DPI)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "lectures" / "figures")
    out = parser.parse_args().out
    out.mkdir(parents=True, exist_ok=True)
    timelines(out)
    bubble(out)
    memory(out)


if __name__ == "__main__":
    main()
