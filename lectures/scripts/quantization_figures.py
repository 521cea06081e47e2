"""Generate the figures of lecture 06-quantization.

    python lectures/scripts/quantization_figures.py [--out DIR]

Writes quantization_grids.png, quantization_granularity.png and quantization_decode.png into
DIR (default: <repo>/lectures/figures). Deterministic, no network.

The grids and SQNR bars come from the course's own reference (solutions/quantization), so the
figures show exactly what the graded functions compute.
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


def _load(name: str) -> ModuleType:
    """A module of solutions/quantization (its files import each other by their plain names)."""
    folder = str(REPO / "solutions" / "quantization")
    if folder not in sys.path:
        sys.path.insert(0, folder)
    return importlib.import_module(name)


integer, nf4, fp8, metrics = (_load(n) for n in ("integer", "nf4", "fp8", "metrics"))


def fig_grids(out: Path) -> Path:
    """The values each 4- or 8-bit format can represent on [-1, 1], over a normal density."""
    e4m3 = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).float()
    e4m3 = e4m3[torch.isfinite(e4m3)] / 448.0  # scaled so that the largest magnitude is 1
    grids = {
        "int4 symmetric (15 levels)": torch.arange(-7, 8) / 7.0,
        "NF4 (16 levels)": nf4.NF4_CODE,
        "FP8 e4m3, scaled (253 levels)": e4m3,
    }
    fig, axes = plt.subplots(len(grids), 1, figsize=(8, 4.8), sharex=True)
    density_x = np.linspace(-1, 1, 400)
    density = np.exp(-0.5 * (density_x * 2.5) ** 2)  # weights / absmax: roughly N(0, 0.4^2)
    for ax, (name, values) in zip(axes, grids.items()):
        ax.fill_between(density_x, 0, density, color="tab:blue", alpha=0.15, label="weight density")
        ax.vlines(values.numpy(), 0, 1, color="black", linewidth=0.8 if len(values) > 32 else 1.5)
        ax.set_yticks([])
        ax.set_title(name, fontsize=10, loc="left")
    axes[0].legend(loc="upper right", fontsize="small")
    axes[-1].set_xlabel("value / scale (the block's largest magnitude maps to ±1)")
    fig.tight_layout()
    path = out / "quantization_grids.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def outlier_weight(seed: int = 0) -> torch.Tensor:
    """A 256 x 512 Gaussian weight (std 0.02) with 8 outliers of 50 std, as in the grader."""
    gen = torch.Generator().manual_seed(seed)
    w = torch.randn(256, 512, generator=gen) * 0.02
    index = torch.randperm(w.numel(), generator=gen)[:8]
    w.view(-1)[index] = 1.0 * torch.sign(torch.randn(8, generator=gen))
    return w


def scheme_sqnr(w: torch.Tensor) -> dict[str, float]:
    """SQNR (dB) of every scheme of the lecture on `w`."""
    schemes = {
        "int8 tensor": dict(bits=8),
        "int8 channel": dict(bits=8, granularity="channel"),
        "int4 tensor": dict(bits=4),
        "int4 channel": dict(bits=4, granularity="channel"),
        "int4 group 128": dict(bits=4, granularity="group", group_size=128),
    }
    result = {
        name: metrics.sqnr_db(w, integer.dequantize(integer.quantize(w, **options)))
        for name, options in schemes.items()
    }
    codes, absmax = nf4.quantize_nf4(w, 64)
    result["NF4 block 64"] = metrics.sqnr_db(w, nf4.dequantize_nf4(codes, absmax, tuple(w.shape), 64))
    for fmt in ("e4m3", "e5m2"):
        data, scale = fp8.quantize_fp8(w, fmt)
        result[f"FP8 {fmt} tensor"] = metrics.sqnr_db(w, data.float() * scale)
    return result


def fig_granularity(out: Path) -> Path:
    gaussian = torch.randn(256, 512, generator=torch.Generator().manual_seed(1)) * 0.02
    with_outliers = scheme_sqnr(outlier_weight())
    plain = scheme_sqnr(gaussian)
    names = list(plain)
    y = np.arange(len(names))
    fig, ax = plt.subplots(figsize=(8, 4.2))
    ax.barh(y + 0.2, [plain[n] for n in names], height=0.4, label="Gaussian weights")
    ax.barh(y - 0.2, [with_outliers[n] for n in names], height=0.4, label="with 8 outliers (50 std)")
    ax.set_yticks(y, names)
    ax.invert_yaxis()
    ax.set_xlabel("SQNR (dB, higher is better; +6 dB per bit)")
    ax.grid(True, axis="x", alpha=0.3)
    ax.legend(loc="lower right", fontsize="small")
    ax.set_title("Error of each scheme on a 256 x 512 weight matrix")
    fig.tight_layout()
    path = out / "quantization_granularity.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def fig_decode(out: Path) -> Path:
    """Lower bound on the time per decoded token of a 7B-parameter model at batch 1: every
    weight is read once per token, at the HBM bandwidth of one H100 (3.35 TB/s)."""
    params, bandwidth = 7e9, 3.35e12
    formats = {"fp32": 4, "bf16": 2, "int8 + channel scales": 1, "int4 + group-128 scales": 0.5 + 4 / 128}
    ms = [params * b / bandwidth * 1e3 for b in formats.values()]
    fig, ax = plt.subplots(figsize=(7, 3.4))
    bars = ax.bar(list(formats), ms, color=["tab:gray", "tab:blue", "tab:orange", "tab:green"])
    ax.bar_label(bars, labels=[f"{m:.1f} ms" for m in ms])
    ax.set_ylabel("ms per token (weight reads only)")
    ax.set_title("Decoding is memory-bound: 7B parameters, batch 1, 3.35 TB/s")
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    path = out / "quantization_decode.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "lectures" / "figures", help="output directory")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for path in (fig_grids(args.out), fig_granularity(args.out), fig_decode(args.out)):
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
