"""Generate the figures of lecture 03-attention.

    python lectures/scripts/attention_figures.py [--out DIR]

Writes attention_hbm_traffic.png, attention_online_softmax.png, attention_causal_tiles.png and
attention_kv_cache.png into DIR (default: <repo>/lectures/figures). Deterministic, no network.
The online-softmax and tiling figures run the course's own code (solutions/attention), and the
KV-cache figure uses its cache_bytes_per_token, so the figures cannot drift from the exercises.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import torch

matplotlib.use("Agg")

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "solutions" / "attention"))

from flash_torch import _blocks, _visible  # noqa: E402
from mla import cache_bytes_per_token  # noqa: E402

DPI = 120


def hbm_traffic(out: Path) -> None:
    """Bytes read and written in HBM by one attention head's forward, naive vs tiled (bf16, d=64).

    Naive: read Q, K, V (3Nd), write S (N^2), read S and write P (2N^2), read P and V, write O
    (N^2 + 2Nd). Tiled (FlashAttention-2, block of M query rows): read Q and write O once (2Nd),
    and read K, V once per query block (2Nd * N/M)."""
    n = np.logspace(9, 17, 50, base=2)
    d, block, size = 64, 128, 2
    naive = (4 * n * d + 4 * n**2) * size
    tiled = (2 * n * d + 2 * n * d * np.ceil(n / block)) * size
    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=DPI)
    ax.loglog(n, naive / 2**20, label="naive: S and P go through HBM", color="tab:red")
    ax.loglog(n, tiled / 2**20, label="tiled: K, V re-read once per 128 queries", color="tab:blue")
    ax.loglog(n, 4 * n * d * size / 2**20, "--", color="gray", label="Q, K, V, O once (the floor)")
    ax.set_xlabel("sequence length N")
    ax.set_ylabel("HBM traffic per head (MiB)")
    ax.set_title("Attention forward, one head, d = 64, bf16")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "attention_hbm_traffic.png")
    plt.close(fig)


def online_softmax(out: Path) -> None:
    """One query row, eight tiles of keys: the running max m, the running denominator l rescaled
    to the current max, and the exact denominator they end at."""
    gen = torch.Generator().manual_seed(3)
    scores = torch.randn(64, generator=gen, dtype=torch.float64) * 2
    scores[40] = 7.0  # a late maximum forces a rescale
    m, denom, ms, denoms = -np.inf, 0.0, [], []
    for tile in scores.split(8):
        m_new = max(m, float(tile.max()))
        denom = denom * np.exp(m - m_new) + float(torch.exp(tile - m_new).sum())
        m = m_new
        ms.append(m)
        denoms.append(denom)
    exact = float(torch.exp(scores - scores.max()).sum())
    fig, (left, right) = plt.subplots(1, 2, figsize=(9.0, 3.6), dpi=DPI)
    left.bar(range(64), scores.numpy(), color=[f"C{i // 8}" for i in range(64)])
    left.step(np.arange(8) * 8 + 7, ms, where="post", color="black", label="running max m after each tile")
    left.set_xlabel("key index (colours: tiles of 8 keys)")
    left.set_ylabel("score s_j")
    left.legend(fontsize=8)
    right.plot(range(1, 9), denoms, "o-", label="running l (scaled to the current m)")
    right.axhline(exact, color="gray", linestyle="--", label="exact sum of exp(s - max s)")
    right.set_xlabel("tiles seen")
    right.set_ylabel("denominator l")
    right.legend(fontsize=8)
    fig.suptitle("Online softmax: one pass, rescaling when the maximum grows")
    fig.tight_layout()
    fig.savefig(out / "attention_online_softmax.png")
    plt.close(fig)


def causal_tiles(out: Path) -> None:
    """Which (query block, key block) tiles flash_attention_torch visits with causal masking,
    for seq_q = 200 queries at the end of seq_k = 320 keys, 64 x 64 blocks."""
    seq_q, seq_k, block = 200, 320, 64
    offset = seq_k - seq_q
    rows, cols = _blocks(seq_q, block), _blocks(seq_k, block)
    grid = np.zeros((len(rows), len(cols)))
    for i, r in enumerate(rows):
        for j, c in enumerate(cols):
            if _visible(r, c, offset, True):
                full = c[1] - 1 <= r[0] + offset  # every query sees every key of the tile
                grid[i, j] = 2 if full else 1
    fig, ax = plt.subplots(figsize=(6.0, 4.0), dpi=DPI)
    cmap = matplotlib.colors.ListedColormap(["white", "tab:orange", "tab:blue"])
    ax.imshow(grid, cmap=cmap, vmin=0, vmax=2)
    for i in range(len(rows)):
        for j in range(len(cols)):
            label = ["skipped", "masked", "full"][int(grid[i, j])]
            ax.text(j, i, label, ha="center", va="center", fontsize=8)
    ax.set_xticks(range(len(cols)), [f"{c[0]}-{c[1] - 1}" for c in cols], fontsize=7)
    ax.set_yticks(range(len(rows)), [f"{r[0]}-{r[1] - 1}" for r in rows], fontsize=7)
    ax.set_xlabel("key block")
    ax.set_ylabel("query block")
    ax.set_title("Causal tiles, 200 queries at the end of 320 keys")
    fig.tight_layout()
    fig.savefig(out / "attention_causal_tiles.png")
    plt.close(fig)


def kv_cache(out: Path) -> None:
    """KV-cache bytes per token, 60 layers, 128 heads of 128 (a DeepSeek-V2-sized model), bf16."""
    shape = {"n_layers": 60, "n_heads": 128, "head_dim": 128}
    variants = {
        "MHA": cache_bytes_per_token("mha", **shape),
        "GQA (8 kv heads)": cache_bytes_per_token("gqa", **shape, n_kv_heads=8),
        "MQA": cache_bytes_per_token("mqa", **shape),
        "MLA (latent 512)": cache_bytes_per_token("mla", **shape, kv_latent_dim=512),
    }
    fig, ax = plt.subplots(figsize=(6.4, 3.6), dpi=DPI)
    bars = ax.barh(list(variants), [v / 2**10 for v in variants.values()], color=["C3", "C1", "C2", "C0"])
    ax.bar_label(bars, [f"{v / 2**10:,.0f} KiB" for v in variants.values()], fontsize=8)
    ax.set_xscale("log")
    ax.set_xlabel("KV cache per token (KiB, log scale)")
    ax.invert_yaxis()
    ax.set_title("60 layers x 128 heads x 128, bf16")
    fig.tight_layout()
    fig.savefig(out / "attention_kv_cache.png")
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "lectures" / "figures")
    out = parser.parse_args().out
    out.mkdir(parents=True, exist_ok=True)
    for figure in (hbm_traffic, online_softmax, causal_tiles, kv_cache):
        figure(out)


if __name__ == "__main__":
    main()
