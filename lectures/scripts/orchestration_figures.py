"""Generate the figures of lecture 15-orchestration.

    python lectures/scripts/orchestration_figures.py [--out DIR]

Writes orch_day.png (a day of a shared cluster's training jobs, scheduled with and without
backfilling: GPUs in use and waits) and orch_dashboard.png (a DCGM scrape of three nodes as a
per-job dashboard, the findings marked) into DIR (default: <repo>/lectures/figures). The
schedules and the findings come from the course's own solutions/orchestration, so the figures
show what the graded code gives. Deterministic (seeded traces and scrapes), no network, seconds.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections import defaultdict
from pathlib import Path
from statistics import median

import matplotlib
import matplotlib.pyplot as plt

matplotlib.use("Agg")

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
from grader.models.cluster import Cluster  # noqa: E402
from grader.models.dcgm_scrape import example_fleet  # noqa: E402
from grader.models.job_trace import busy_gpus, default_queues, job_trace, mean_wait, utilization, waits  # noqa: E402

DPI = 120
MARKERS = {"xid": ("X", "red"), "throttling": ("^", "darkorange"), "nvlink_errors": ("D", "purple"),
           "straggler": ("v", "black")}  # fmt: skip


def _solution(name: str):
    sys.path.insert(0, str(REPO / "solutions" / "orchestration"))
    return importlib.import_module(name)


def day(out: Path) -> None:
    """16 DGX H100 nodes on a fat-tree of 4 per leaf, two teams in one cohort, one seeded day."""
    scheduler = _solution("scheduler")
    cluster = Cluster.h100_cluster(16, topology="fat_tree")
    jobs, queues = job_trace(seed=0, nodes=16), default_queues(cluster)
    runs = {
        "EASY backfilling": scheduler.schedule(jobs, queues, cluster),
        "first come, first served": scheduler.schedule(jobs, queues, cluster, backfill=False),
    }
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.6))
    longest = max(max(waits(events, jobs).values()) for events in runs.values())
    for name, events in runs.items():
        steps = busy_gpus(events, jobs)
        used, wait = utilization(events, jobs, cluster, end=24 * 60), mean_wait(events, jobs)
        label = f"{name}: {used:.1%} busy, mean wait {wait:.0f} min"
        left.step([m / 60 for m, _ in steps], [g / cluster.num_gpus for _, g in steps], where="post", label=label)
        right.hist(list(waits(events, jobs).values()), bins=range(0, longest + 30, 30), alpha=0.6, label=name)
        print(f"{name}: {len(jobs)} jobs, utilization over the day {used:.3f}, mean wait {wait:.1f} min")
    left.set(xlabel="hour", ylabel="GPUs in use (fraction)", xlim=(0, 30), ylim=(0, 1.05))
    left.set_title("GPUs in use", fontsize=9)
    right.set(xlabel="wait (minutes)", ylabel="jobs", yscale="log")
    right.set_title("waits", fontsize=9)
    left.legend(fontsize=7, loc="lower right")
    right.legend(fontsize=7)
    fig.suptitle(f"job_trace(seed=0, nodes=16): {len(jobs)} jobs on 128 H100s, 4 nodes per leaf", fontsize=10)
    fig.tight_layout()
    fig.savefig(out / "orch_day.png", dpi=DPI)
    plt.close(fig)


def dashboard(out: Path) -> None:
    """example_fleet(0): SM activity per GPU grouped by job, half of each job's median dashed
    (diagnose's straggler threshold), GPU utilization as grey ticks, the findings marked."""
    monitoring = _solution("monitoring")
    fleet = example_fleet(seed=0)
    records = monitoring.gpu_samples(fleet.scrape)
    findings = monitoring.diagnose(fleet.scrape, fleet.pods)
    job_of = {
        (p["metadata"]["namespace"], p["metadata"]["name"]): p["metadata"]["labels"].get("batch.kubernetes.io/job-name")
        for p in fleet.pods
    }
    groups = defaultdict(list)
    for r in records:
        groups[job_of.get((r["namespace"], r["pod"])) or (r["pod"] and "(no job)") or "(no pod)"].append(r)
    fig, ax = plt.subplots(figsize=(11, 3.6))
    x = 0
    for job, members in groups.items():
        sm = [r["metrics"].get("DCGM_FI_PROF_SM_ACTIVE") or 0 for r in members]
        xs = range(x, x + len(members))
        ax.bar(xs, sm, label=job)
        ax.plot(xs, [r["metrics"].get("DCGM_FI_DEV_GPU_UTIL", 0) / 100 for r in members], "_", color="gray", ms=9)
        if len(members) > 1 and not job.startswith("("):
            ax.hlines(0.5 * median(sm), x - 0.4, x + len(members) - 0.6, colors="k", linestyles="dashed")
        for i, r in zip(xs, members):
            mine = [f for f in findings if (f["node"], f["gpu"]) == (r["node"], r["gpu"])]
            for n, f in enumerate(mine):
                marker, colour = MARKERS[f["kind"]]
                ax.plot(i, 1.06 + 0.09 * n, marker, color=colour)
        x += len(members) + 1
    for kind, (marker, colour) in MARKERS.items():
        ax.plot([], [], marker, color=colour, label=kind, linestyle="none")
    ax.set(ylabel="SM active (bars), GPU util (ticks)", ylim=(0, 1.4), xticks=[])
    ax.set_title("example_fleet(seed=0): 3 nodes of 8 H100s, GPUs grouped by job", fontsize=9)
    ax.legend(fontsize=7, ncol=4, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(out / "orch_dashboard.png", dpi=DPI)
    plt.close(fig)
    for f in findings:
        print(f"{f['node']} GPU {f['gpu']} ({f['job']}): {f['kind']} -> {f['action']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "lectures" / "figures")
    out = parser.parse_args().out
    out.mkdir(parents=True, exist_ok=True)
    day(out)
    dashboard(out)


if __name__ == "__main__":
    main()
