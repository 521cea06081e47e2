"""Generate the figures of lecture 13-the-cluster.

    python lectures/scripts/cluster_figures.py [--out DIR]

Writes cluster_topologies.png, cluster_link_loads.png, cluster_allreduce_time.png and
cluster_alltoall_time.png into DIR
(default: <repo>/lectures/figures) and prints the numbers the lecture quotes. Deterministic, no
network, a few seconds (the 16,384-GPU simulations take about two of them).

The clusters, the links and the simulated times come from the course's given
grader/models/cluster.py; the schedules, the link loads and the two-level model from the
course's own solutions/cluster/*.py, so the figures show what the graded code gives.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt
from matplotlib.patches import Rectangle

matplotlib.use("Agg")

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
from grader.models.cluster import Cluster, ScheduleError, simulate  # noqa: E402

DPI = 120
KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30
ALGORITHMS = ("ring", "hierarchical", "double_binary_tree", "recursive_halving_doubling")
COLOURS = {"ring": "#4c72b0", "hierarchical": "#c44e52", "double_binary_tree": "#55a868"}
COLOURS["recursive_halving_doubling"] = "#8172b2"
LABELS = {
    "ring": "ring (flat)",
    "hierarchical": "hierarchical ring",
    "double_binary_tree": "double binary tree",
    "recursive_halving_doubling": "recursive halving-doubling",
}
CLASS_COLOURS = {"nvlink": "#55a868", "nic": "#4c72b0", "spine": "#c44e52"}
RAILS = plt.get_cmap("tab10").colors


def save(fig: plt.Figure, path: Path, title: str) -> None:
    """Title the figure, lay it out, write it as a PNG and close it."""
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)


def _solution(name: str):
    sys.path.insert(0, str(REPO / "solutions" / "cluster"))
    return importlib.import_module(name)


def _schedule(algorithm: str, cluster: Cluster, nbytes: int) -> dict:
    schedules = _solution("schedules")
    gpus = list(range(cluster.num_gpus))
    if algorithm == "hierarchical":
        return schedules.hierarchical_allreduce_schedule(cluster, nbytes)
    return getattr(schedules, f"{algorithm}_allreduce_schedule")(gpus, nbytes)


def _merged_rings(groups: list[list[int]], nbytes: int) -> dict:
    """One schedule in which every group of `groups` (all of one size) runs its ring all-reduce
    at the same time: the rings' steps side by side."""
    rings = [_solution("schedules").ring_allreduce_schedule(group, nbytes) for group in groups]
    steps = [
        (repeat, [t for ring in rings for t in ring["steps"][i][1]]) for i, (repeat, _) in enumerate(rings[0]["steps"])
    ]
    gpus = [gpu for group in groups for gpu in group]
    return {"op": "all_reduce", "gpus": gpus, "nbytes": nbytes, "chunks": len(groups[0]), "steps": steps}


def topologies(out: Path) -> None:
    """4 nodes of 8 GPUs on leaves of 16 host ports: which leaf each GPU's NIC plugs into
    (Cluster.leaf_of), for the three topologies of the course's Cluster."""
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.6))
    titles = {
        "fat_tree": "fat_tree: top-of-rack leaves, whole nodes",
        "rail": "rail: leaf k joins NIC k of every node",
        "rail_only": "rail_only: rail switches, no spine",
    }
    for ax, topology in zip(axes, ("fat_tree", "rail", "rail_only")):
        cluster = Cluster(
            nodes=4,
            gpus_per_node=8,
            nvlink_GBps=450.0,
            nics_per_node=8,
            nic_Gbps=400.0,
            topology=topology,
            leaf_down_ports=16,
        )
        leaves = cluster.num_leaves
        width = 4 * 9 - 1
        leaf_x = [width * (j + 0.5) / leaves for j in range(leaves)]
        for node in range(cluster.nodes):
            left = node * 9
            ax.add_patch(Rectangle((left - 0.2, -0.3), 8.4, 2.3, fill=False, edgecolor="black", linewidth=1.2))
            ax.add_patch(Rectangle((left + 0.1, -0.15), 7.8, 0.5, color="#bbbbbb"))
            ax.text(left + 4, 0.1, "NVSwitch", ha="center", va="center", fontsize=6)
            ax.text(left + 4, -0.7, f"node {node}", ha="center", va="center", fontsize=8)
            for local in range(8):
                gpu = node * 8 + local
                x = left + local + 0.5
                ax.add_patch(Rectangle((x - 0.4, 0.6), 0.8, 0.8, color=RAILS[local], alpha=0.9))
                ax.text(x, 1.0, str(local), ha="center", va="center", fontsize=6, color="white", weight="bold")
                ax.plot([x, x], [0.35, 0.6], color="#888888", linewidth=0.8)
                leaf = cluster.leaf_of(gpu)
                ax.plot([x, leaf_x[leaf]], [1.4, 4.6], color=RAILS[local], linewidth=0.7, alpha=0.8)
        for j, x in enumerate(leaf_x):
            ax.add_patch(Rectangle((x - 1.3, 4.6), 2.6, 0.8, facecolor="white", edgecolor="black"))
            name = f"rail {j}" if topology != "fat_tree" else f"leaf {j}"
            ax.text(x, 5.0, name, ha="center", va="center", fontsize=6.5)
        if topology != "rail_only":
            ax.add_patch(Rectangle((2, 7.2), width - 4, 0.9, facecolor="#eeeeee", edgecolor="black"))
            ax.text(
                width / 2, 7.65, "spine (one non-blocking stage in the model)", ha="center", va="center", fontsize=7
            )
            for x in leaf_x:
                ax.plot([x, x], [5.4, 7.2], color="black", linewidth=0.8)
        ax.set(xlim=(-1, width + 1), ylim=(-1.1, 8.4))
        ax.axis("off")
        ax.set_title(titles[topology], fontsize=9)
    save(
        fig,
        out / "cluster_topologies.png",
        "4 DGX-like nodes, 8 GPUs and 8 NICs each (colour = local rank, the GPU's rail), leaves of 16 host ports",
    )


def link_loads(out: Path) -> None:
    """Bytes per link class (link_loads, checked against the simulator) of data-parallel and
    tensor-parallel ring all-reduces placed in different ways on 64 nodes."""
    loads = _solution("loads")
    nodes, nbytes = 64, GIB
    aligned = [[k * 8 + local for k in range(nodes)] for local in range(8)]
    crossing = [[k * 8 + (local + k) % 8 for k in range(nodes)] for local in range(8)]
    panels = {
        "data parallel: 8 rings of 64 GPUs (one GPU per node), N each": [
            ("one local rank per ring\nrail-optimised", aligned, "rail"),
            ("one local rank per ring\nfat-tree", aligned, "fat_tree"),
            ("local rank shifts by node\nrail-optimised", crossing, "rail"),
        ],
        "tensor parallel: 1 ring of 8 GPUs, N": [
            ("inside node 0", [list(range(8))], "rail"),
            ("GPU 0 of nodes 0-7\nrail-optimised", [[8 * k for k in range(8)]], "rail"),
            ("GPU 0 of nodes 0-7\nfat-tree", [[8 * k for k in range(8)]], "fat_tree"),
        ],
    }
    fig, axes = plt.subplots(1, 2, figsize=(12.5, 4.2))
    for ax, (title, cases) in zip(axes, panels.items()):
        top = 0.0
        for i, (name, groups, topology) in enumerate(cases):
            cluster = Cluster.h100_cluster(nodes, topology)
            found = loads.link_loads(cluster, groups, nbytes)
            result = simulate(cluster, _merged_rings(groups, nbytes))
            simulated = result.bytes_by_class()
            assert all(abs(found[c] - simulated[c]) <= 1e-9 * max(1.0, found[c]) for c in found), (found, simulated)
            for j, (link_class, value) in enumerate(found.items()):
                ax.bar(
                    i + (j - 1) * 0.26,
                    value / nbytes,
                    width=0.26,
                    color=CLASS_COLOURS[link_class],
                    label=link_class if i == 0 else None,
                )
                top = max(top, value / nbytes)
            ax.text(
                i,
                -0.16,
                f"simulated {result.makespan * 1e3:.1f} ms",
                ha="center",
                va="top",
                fontsize=8,
                transform=ax.get_xaxis_transform(),
            )
            panel, case = title.split(":")[0], name.replace("\n", ", ")
            print(
                f"{panel}, {case} ({topology}): "
                + ", ".join(f"{c} {v / nbytes:g} N" for c, v in found.items())
                + f"; simulated {result.makespan * 1e3:.2f} ms for N = 1 GiB, busiest link {result.busiest_link[0]}"
            )
        ax.set_xticks(range(len(cases)), [name for name, _, _ in cases], fontsize=7.5)
        ax.set(ylabel="bytes summed over the class's links / N", ylim=(0, top * 1.15))
        ax.set_title(title, fontsize=9)
        ax.legend(fontsize=7.5)
    try:  # the rail-crossing rings on a rail-only cluster
        loads.link_loads(Cluster.h100_cluster(nodes, "rail_only"), crossing, nbytes)
    except ScheduleError as error:
        print(f"rail_only refuses the rail-crossing rings: {error}")
    save(
        fig,
        out / "cluster_link_loads.png",
        "Ring all-reduces on 64 DGX H100 nodes: where the bytes go (link_loads), "
        "and the simulated time for N = 1 GiB (below)",
    )


def allreduce_time(out: Path) -> None:
    """Simulated all-reduce time against size, per algorithm, with the two-level model's
    prediction dashed and choose_algorithm's pick marked, from 8 to 16,384 GPUs."""
    cost = _solution("cost")
    sizes = [1 << k for k in range(10, 31, 2)]
    fig, axes = plt.subplots(2, 3, figsize=(13.5, 7.4))
    for ax, nodes in zip(axes.flat, (1, 3, 8, 128, 2048)):
        cluster = Cluster.h100_cluster(nodes)
        p = cluster.num_gpus
        algorithms = [a for a in ALGORITHMS if a != "recursive_halving_doubling" or not p & (p - 1)]
        runs = {a: simulate(cluster, _schedule(a, cluster, MIB)) for a in algorithms}  # one simulation per schedule
        times = {a: [runs[a].makespan_for(n) for n in sizes] for a in algorithms}
        for a in algorithms:
            ax.plot(sizes, times[a], color=COLOURS[a], label=LABELS[a])
            ax.plot(
                sizes,
                [cost.predicted_time(a, n, cluster) for n in sizes],
                color=COLOURS[a],
                linestyle="--",
                linewidth=0.9,
            )
        picks = [cost.choose_algorithm("all_reduce", n, cluster) for n in sizes]
        ax.scatter(sizes, [times[a][i] for i, a in enumerate(picks)], s=14, color="black", zorder=3)
        ax.set(xscale="log", yscale="log", xlabel="bytes per GPU (N)", ylabel="seconds")
        ax.set_xticks([KIB, MIB, GIB], ["1 KiB", "1 MiB", "1 GiB"])
        ax.grid(alpha=0.3)
        ax.set_title(f"{p:,} GPUs ({nodes} node{'s' if nodes > 1 else ''} of 8)", fontsize=9)
        best = [min(algorithms, key=lambda a: times[a][i]) for i in range(len(sizes))]
        changes = [f"{_size(n)}: {b}" for i, (n, b) in enumerate(zip(sizes, best)) if i == 0 or b != best[i - 1]]
        worst = max(times[a][i] / times[best[i]][i] for i, a in enumerate(picks))
        model = max(
            max(cost.predicted_time(a, n, cluster) / t, t / cost.predicted_time(a, n, cluster))
            for a in algorithms
            for n, t in zip(sizes, times[a])
            if a != "double_binary_tree"
        )
        tree = max(
            cost.predicted_time("double_binary_tree", n, cluster) / t
            for n, t in zip(sizes, times["double_binary_tree"])
        )
        print(
            f"{p} GPUs: fastest simulated from "
            + "; ".join(changes)
            + f". choose_algorithm within {worst:.3f}x of it; "
            f"model/simulator within {model:.2f}x (tree: model up to {tree:.2f}x the simulator)"
        )
        algbw, busbw = cost.bus_bandwidth("all_reduce", GIB, times["hierarchical"][-1], p)
        print(
            f"    hierarchical 1 GiB: {times['hierarchical'][-1] * 1e3:.2f} ms, "
            f"algbw {algbw:.0f} GB/s, busbw {busbw:.0f} GB/s"
        )
    legend = axes.flat[-1]
    legend.axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    handles += [
        plt.Line2D([], [], color="gray", linestyle="--", linewidth=0.9),
        plt.Line2D([], [], color="black", marker="o", linestyle="", markersize=4),
    ]
    labels += ["predicted_time (cost.py)", "choose_algorithm's pick"]
    legend.legend(handles, labels, loc="center", fontsize=9, title="solid: simulated (grader/models/cluster.py)")
    save(
        fig,
        out / "cluster_allreduce_time.png",
        "All-reduce on DGX H100 nodes, rail-optimised 400 Gb/s fabric: simulated time and the two-level model",
    )


def alltoall_time(out: Path) -> None:
    """Simulated all-to-all time against size: the given flat schedule against the hierarchical
    one, on a rail-optimised cluster and on a 2:1 oversubscribed fat-tree."""
    schedules = _solution("schedules")
    sizes = [1 << k for k in range(10, 31, 2)]
    fabrics = {"rail-optimised": ("rail", 1.0), "fat-tree, 2:1 oversubscribed": ("fat_tree", 2.0)}
    styles = {"flat": "-", "hierarchical": "--"}
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2), sharey=True)
    for ax, nodes in zip(axes, (8, 32)):
        for colour, (fabric, (topology, oversubscription)) in zip(("#4c72b0", "#c44e52"), fabrics.items()):
            cluster = Cluster.h100_cluster(nodes, topology, oversubscription)
            gpus = list(range(cluster.num_gpus))
            runs = {
                "flat": simulate(cluster, schedules.flat_alltoall_schedule(gpus, MIB)),
                "hierarchical": simulate(cluster, schedules.hierarchical_alltoall_schedule(cluster, MIB)),
            }
            for name, run in runs.items():
                seconds = [run.makespan_for(n) for n in sizes]
                ax.plot(sizes, seconds, color=colour, linestyle=styles[name], label=f"{name}, {fabric}")
                shown = ", ".join(
                    f"{_size(n)} {t * 1e6:.1f} us"
                    for n, t in zip(sizes, seconds)
                    if n in (KIB, MIB, 16 * MIB, 256 * MIB)
                )
                print(
                    f"all-to-all, {cluster.num_gpus} GPUs, {fabric}, {name}: {shown}; bytes by class per N = 1 MiB "
                    + ", ".join(f"{c} {v / MIB:g} MiB" for c, v in run.bytes_by_class().items())
                )
        ax.set(xscale="log", yscale="log", xlabel="bytes each GPU sends (N)", ylabel="seconds")
        ax.set_xticks([KIB, MIB, GIB], ["1 KiB", "1 MiB", "1 GiB"])
        ax.grid(alpha=0.3)
        ax.set_title(f"{nodes * 8} GPUs ({nodes} nodes of 8)", fontsize=9)
    axes[0].legend(fontsize=8)
    save(
        fig,
        out / "cluster_alltoall_time.png",
        "All-to-all on DGX H100 nodes: flat_alltoall_schedule against hierarchical_alltoall_schedule (simulated)",
    )


def _size(nbytes: int) -> str:
    for unit, name in ((GIB, "GiB"), (MIB, "MiB"), (KIB, "KiB")):
        if nbytes >= unit:
            return f"{nbytes // unit} {name}"
    return f"{nbytes} B"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "lectures" / "figures")
    out = parser.parse_args().out
    out.mkdir(parents=True, exist_ok=True)
    topologies(out)
    link_loads(out)
    allreduce_time(out)
    alltoall_time(out)


if __name__ == "__main__":
    main()
