"""Generate the figures of lecture 09-scaling-laws-and-cost.

    python lectures/scripts/scaling_figures.py [--out DIR]

Writes scaling_attention_share.png, scaling_roofline.png, scaling_memory.png and
scaling_isoflop.png into DIR (default: <repo>/lectures/figures). Deterministic, no network, a few
seconds on a CPU.

FLOPs come from the course's transformer_flops, memory from its training_memory, the fit from its
fit_scaling_law on the shipped Chinchilla points (all from solutions/scaling), so the figures show
what the graded code computes. Hardware figures: NVIDIA H100 SXM datasheet (989 TFLOP/s dense
bf16, 3.35 TB/s HBM3).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt
import numpy as np

matplotlib.use("Agg")

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "solutions" / "scaling"))
sys.path.insert(0, str(REPO))

from fit import compute_optimal, fit_scaling_law  # noqa: E402
from flops import transformer_flops  # noqa: E402
from memory import training_memory  # noqa: E402

from grader.models.chinchilla import chinchilla_points  # noqa: E402
from grader.models.transformer_config import TransformerConfig  # noqa: E402

DPI = 120
H100_FLOPS, H100_BYTES_PER_S = 989e12, 3.35e12
MODELS = {
    "GPT-3 175B": TransformerConfig(96, 12288, 96, 96, 49152, 50257),
    "Llama-2 7B": TransformerConfig(32, 4096, 32, 32, 11008, 32000, gated_mlp=True),
    "Llama-2 70B (GQA)": TransformerConfig(80, 8192, 64, 8, 28672, 32000, gated_mlp=True),
    "TinyGPT": TransformerConfig(2, 64, 4, 2, 256, 97),
}


def attention_share(out: Path) -> None:
    """Share of a training step's FLOPs spent in q k^T and weights @ v, against sequence length."""
    lengths = [2**k for k in range(7, 18)]
    fig, ax = plt.subplots(figsize=(7, 3.6))
    for name, cfg in MODELS.items():
        shares = []
        for s in lengths:
            total = transformer_flops(cfg, s)
            without = transformer_flops(cfg, 1) - 12 * cfg.num_layers * cfg.d_model  # the s-independent part
            shares.append(1 - without / total)
        ax.plot(lengths, shares, marker="o", markersize=3, label=name)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("sequence length s")
    ax.set_ylabel("attention share of FLOPs")
    ax.set_title("12 L s d / (6N + 12 L s d): attention matters once s approaches 6 d")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / "scaling_attention_share.png", dpi=DPI)
    plt.close(fig)


def roofline(out: Path) -> None:
    """Attainable FLOP/s = min(peak, intensity x bandwidth), with the kernels of a transformer."""
    ridge = H100_FLOPS / H100_BYTES_PER_S
    intensity = np.logspace(-0.5, 4, 200)
    fig, ax = plt.subplots(figsize=(7, 3.8))
    ax.plot(intensity, np.minimum(H100_FLOPS, intensity * H100_BYTES_PER_S) / 1e12, color="black")
    d = 8192

    def matmul(m: int, k: int, n: int) -> float:  # bf16: 2 bytes per element read or written
        return 2 * m * k * n / (2 * (m * k + k * n + m * n))

    points = {
        "training matmul, 16384 tokens x 8192 x 8192": matmul(16384, d, d),
        "prefill attention (FlashAttention), s = 2048": 2048 / 2,  # 4 s^2 d_h FLOPs over 8 s d_h bytes
        "decode, batch 64: (64 x d) @ (d x d)": matmul(64, d, d),
        "decode attention, GQA 8 query heads per KV head": 8.0,  # each cached element serves 8 heads
        "decode, batch 1: (1 x d) @ (d x d)": matmul(1, d, d),
    }
    for (label, x), color in zip(points.items(), plt.cm.tab10.colors):
        ax.scatter(
            [x], [min(H100_FLOPS, x * H100_BYTES_PER_S) / 1e12], color=color, label=f"{label}: {x:.0f}", zorder=3
        )
    ax.axvline(ridge, linestyle=":", color="gray")
    ax.text(ridge * 1.1, 20, f"ridge {ridge:.0f} FLOP/byte", fontsize=8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP per byte moved)")
    ax.set_ylabel("attainable TFLOP/s (H100, bf16)")
    ax.set_title("Roofline: decode sits far left of the ridge (memory-bound)")
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    fig.savefig(out / "scaling_roofline.png", dpi=DPI)
    plt.close(fig)


def memory_budget(out: Path) -> None:
    """Bytes per GPU of Llama-2 70B's shape, seq 4096, micro-batch 1, on 64 GPUs split three ways."""
    cfg = MODELS["Llama-2 70B (GQA)"]
    setups = {
        "DP 64\nno ZeRO": dict(dp=64),
        "DP 64\nZeRO-3": dict(dp=64, zero_stage=3),
        "TP 8, DP 8\nZeRO-1": dict(dp=8, tp=8, zero_stage=1),
        "TP 8, PP 4, DP 2\nZeRO-1, SP": dict(dp=2, tp=8, pp=4, zero_stage=1, sequence_parallel=True),
        "same +\nselective recompute": dict(
            dp=2, tp=8, pp=4, zero_stage=1, sequence_parallel=True, recompute="selective"
        ),
    }
    parts = ("parameters", "gradients", "optimizer", "activations")
    rows = {name: training_memory(cfg, 1, 4096, **kwargs) for name, kwargs in setups.items()}
    fig, ax = plt.subplots(figsize=(8, 3.8))
    bottom = np.zeros(len(rows))
    for part in parts:
        values = np.array([row[part] / 2**30 for row in rows.values()])
        ax.bar(list(rows), values, bottom=bottom, label=part)
        bottom += values
    ax.axhline(80, color="black", linestyle=":")
    ax.text(4.4, 85, "80 GB", fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("GiB per GPU")
    ax.set_title("Llama-2 70B shape, s = 4096, micro-batch 1, 64 GPUs (training_memory)")
    ax.tick_params(axis="x", labelsize=8)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "scaling_memory.png", dpi=DPI)
    plt.close(fig)


def isoflop(out: Path) -> None:
    """The fitted law along iso-FLOP lines, with the compute-optimal frontier and the data."""
    n, _, loss = chinchilla_points(drop_outliers=False)
    fit = fit_scaling_law(*chinchilla_points())
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    sizes = np.logspace(7.5, 11.5, 200)
    budgets = [6e18, 1e20, 1e21, 1e22, 5.76e23]
    for budget, color in zip(budgets, plt.cm.viridis(np.linspace(0, 0.9, len(budgets)))):
        tokens = budget / (6 * sizes)
        curve = fit["E"] + fit["A"] / sizes ** fit["alpha"] + fit["B"] / tokens ** fit["beta"]
        left.plot(sizes, curve, color=color, label=f"C = {budget:.2g}")
        n_opt, _ = compute_optimal(budget, fit)
        d_opt = budget / (6 * n_opt)
        left.scatter(
            [n_opt], [fit["E"] + fit["A"] / n_opt ** fit["alpha"] + fit["B"] / d_opt ** fit["beta"]], color=color
        )
    left.scatter(n.numpy(), loss.numpy(), s=4, color="gray", alpha=0.5, label="figure 4 points")
    left.set_xscale("log")
    left.set_ylim(1.9, 4.5)
    left.set_xlabel("parameters N")
    left.set_ylabel("loss")
    left.set_title("iso-FLOP curves of the fitted L(N, D)")
    left.legend(fontsize=7)
    budgets = np.logspace(18, 26, 50)
    optimal = np.array([compute_optimal(c, fit) for c in budgets])
    right.plot(budgets, optimal[:, 0], label="N* (parameters)")
    right.plot(budgets, optimal[:, 1], label="D* (tokens)")
    right.plot(budgets, 20 * optimal[:, 0], linestyle=":", color="gray", label="20 N*")
    right.set_xscale("log")
    right.set_yscale("log")
    right.set_xlabel("training compute C (FLOPs)")
    right.set_title(f"compute-optimal frontier: alpha = {fit['alpha']:.3f}, beta = {fit['beta']:.3f}")
    right.legend(fontsize=8)
    right.grid(alpha=0.3, which="both")
    fig.tight_layout()
    fig.savefig(out / "scaling_isoflop.png", dpi=DPI)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "lectures" / "figures")
    out = parser.parse_args().out
    out.mkdir(parents=True, exist_ok=True)
    attention_share(out)
    roofline(out)
    memory_budget(out)
    isoflop(out)


if __name__ == "__main__":
    main()
