"""Generate the figures of lecture 04-mixture-of-experts.

    python lectures/scripts/moe_figures.py [--out DIR]

Writes moe_params_vs_compute.png, moe_capacity_drops.png and moe_all_to_all.png into DIR
(default: <repo>/lectures/figures). Deterministic (fixed seeds), no network, a few seconds.

Routing, capacity and dispatch come from the course's own solutions/moe/routing.py, so the
figures show what the graded code does.
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
import torch

matplotlib.use("Agg")

REPO = Path(__file__).resolve().parents[2]
DPI = 120


def _load_routing() -> ModuleType:
    """Import the course's routing code from solutions/moe (not an installed package)."""
    sys.path.insert(0, str(REPO / "solutions" / "moe"))
    return importlib.import_module("routing")


routing = _load_routing()


def params_vs_compute(out: Path) -> None:
    """Parameters and per-token FLOPs of a dense SwiGLU FFN and of MoE layers built from it."""
    d, f = 4096, 14336  # Mixtral-8x7B's d_model and expert width
    ffn_params = 3 * d * f
    layouts = [
        ("dense FFN", 1, 1, 0),
        ("8 experts, top-2\n(Mixtral)", 8, 2, 0),
        ("64 experts of 1/8 width,\ntop-8 + 1 shared", 64, 8, 1),
    ]
    names, params, flops = [], [], []
    for name, experts, k, shared in layouts:
        width = f if experts <= 8 else f // 8
        per_expert = 3 * d * width
        names.append(name)
        params.append((experts + shared) * per_expert / ffn_params)
        flops.append((k + shared) * per_expert / ffn_params)  # 2 FLOPs per weight per token, relative
    x = np.arange(len(names))
    fig, ax = plt.subplots(figsize=(7.5, 3.8))
    ax.bar(x - 0.18, params, 0.36, label="parameters (stored)")
    ax.bar(x + 0.18, flops, 0.36, label="FLOPs per token (computed)")
    for xi, p, c in zip(x, params, flops):
        ax.text(xi - 0.18, p, f"{p:.3g}x", ha="center", va="bottom", fontsize=9)
        ax.text(xi + 0.18, c, f"{c:.3g}x", ha="center", va="bottom", fontsize=9)
    ax.set_xticks(x, names)
    ax.set_ylabel("relative to one dense FFN")
    ax.set_ylim(0, 10)
    ax.set_title("Sparse layers grow parameters, not per-token compute")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "moe_params_vs_compute.png", dpi=DPI)
    plt.close(fig)


def _drop_fraction(logits: torch.Tensor, k: int, factor: float) -> float:
    num_tokens, num_experts = logits.shape
    _, ids = routing.topk_route(logits, k)
    capacity = routing.expert_capacity(num_tokens, num_experts, k, factor)
    _, slots = routing.dispatch(torch.zeros(num_tokens, 1), ids, num_experts, capacity)
    return float((slots < 0).float().mean())


def capacity_drops(out: Path) -> None:
    """Share of (token, expert) choices dropped against the capacity factor."""
    gen = torch.Generator().manual_seed(0)
    num_tokens, num_experts, k = 4096, 8, 2
    noise = torch.randn(num_tokens, num_experts, generator=gen)
    routers = {
        "balanced router (random logits)": noise,
        "skewed router (expert 0 favoured)": noise + torch.linspace(1.5, 0.0, num_experts),
    }
    factors = np.linspace(0.5, 2.5, 21)
    fig, ax = plt.subplots(figsize=(7, 3.8))
    for label, logits in routers.items():
        ax.plot(factors, [100 * _drop_fraction(logits, k, float(c)) for c in factors], "o-", ms=3, label=label)
    ax.axvline(1.0, color="gray", ls=":")
    ax.set(xlabel="capacity factor", ylabel="choices dropped (%)", ylim=(0, None))
    ax.set_title(f"Token dropping, {num_tokens} tokens, {num_experts} experts, top-{k}")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "moe_capacity_drops.png", dpi=DPI)
    plt.close(fig)


def all_to_all(out: Path) -> None:
    """Rows each rank sends to each rank in one expert-parallel forward (4 ranks, 8 experts)."""
    gen = torch.Generator().manual_seed(1)
    p, num_experts, k, tokens = 4, 8, 2, 256
    local = num_experts // p
    matrix = np.zeros((p, p), dtype=int)
    for source in range(p):
        logits = torch.randn(tokens, num_experts, generator=gen) + 0.8 * torch.randn(num_experts, generator=gen)
        _, ids = routing.topk_route(logits, k)
        matrix[source] = np.bincount((ids // local).flatten().numpy(), minlength=p)
    fig, ax = plt.subplots(figsize=(5.2, 4.3))
    image = ax.imshow(matrix, cmap="Blues")
    for i in range(p):
        for j in range(p):
            note = " (local)" if i == j else ""
            ax.text(j, i, f"{matrix[i, j]}{note}", ha="center", va="center", fontsize=9)
    ax.set(xticks=range(p), yticks=range(p), xlabel="destination rank (owner of the experts)", ylabel="source rank")
    ax.set_title(f"all-to-all split sizes: {tokens} tokens x top-{k} per rank")
    fig.colorbar(image, ax=ax, shrink=0.8, label="rows (token choices)")
    fig.tight_layout()
    fig.savefig(out / "moe_all_to_all.png", dpi=DPI)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=REPO / "lectures" / "figures")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    params_vs_compute(args.out)
    capacity_drops(args.out)
    all_to_all(args.out)
    print(f"wrote figures to {args.out}")


if __name__ == "__main__":
    main()
