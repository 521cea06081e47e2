"""Generate the figures of lecture 05-kv-cache.

    python lectures/scripts/kv_cache_figures.py [--out DIR]

Writes kv_cache_bytes_per_token.png, kv_cache_decode_flops.png and kv_cache_block_tables.png
into DIR (default: <repo>/lectures/figures). Deterministic, no network, a few seconds on a CPU.

Sizes come from the course's own kv_cache_bytes, FLOPs from torch's FlopCounterMode around the
course's generate on the given TinyGPT, block tables from the course's PagedKVCache (all from
solutions/kv_cache), so the figures show what the graded code does.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt
import torch
from matplotlib.patches import Rectangle
from torch.utils.flop_counter import FlopCounterMode

matplotlib.use("Agg")

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "solutions" / "kv_cache"))

from cache import kv_cache_bytes  # noqa: E402
from generate import build_model, generate  # noqa: E402
from paged import PagedKVCache  # noqa: E402

DPI = 120
KIB = 2**10
TINY = {"vocab_size": 97, "max_seq_len": 1024, "num_layers": 2, "d_model": 64, "num_heads": 4, "num_kv_heads": 2}

# (label, layers, KV heads, head dim) from the published configurations; fp16/bf16 caches.
MODELS = [
    ("Llama-2-7B\nMHA 32/32", 32, 32, 128),
    ("Llama-2-13B\nMHA 40/40", 40, 40, 128),
    ("Llama-2-70B\nGQA 64/8", 80, 8, 128),
    ("Mistral-7B\nGQA 32/8", 32, 8, 128),
    ("Falcon-7B\nMQA 71/1", 32, 1, 64),
]
# DeepSeek-V2 (MLA) caches one latent of 512 plus a shared RoPE key of 64 per layer, 60 layers.
MLA_ELEMENTS_PER_TOKEN = (512 + 64) * 60


def bytes_per_token(out: Path) -> None:
    labels = [m[0] for m in MODELS] + ["DeepSeek-V2\nMLA 512+64"]
    sizes = [kv_cache_bytes(n, h, d, 1, 1, torch.float16) / KIB for _, n, h, d in MODELS]
    sizes.append(MLA_ELEMENTS_PER_TOKEN * 2 / KIB)
    fig, ax = plt.subplots(figsize=(8, 3.6))
    colors = ["tab:red", "tab:red", "tab:blue", "tab:blue", "tab:green", "tab:purple"]
    bars = ax.bar(labels, sizes, color=colors)
    ax.bar_label(bars, labels=[f"{s:.0f} KiB" for s in sizes], fontsize=8)
    ax.set_ylabel("KV cache per token (KiB, 16-bit)")
    ax.set_title("2 x layers x KV heads x head_dim x 2 bytes: fewer KV heads, smaller cache")
    ax.tick_params(axis="x", labelsize=8)
    fig.tight_layout()
    fig.savefig(out / "kv_cache_bytes_per_token.png", dpi=DPI)
    plt.close(fig)


def _decode_flops(model, context: int, use_cache: bool) -> int:
    """FLOPs of one decode step: generate 2 tokens minus generate 1 (same prefill)."""
    prompt = torch.randint(0, 97, (1, context), generator=torch.Generator().manual_seed(context))
    counts = []
    for new in (1, 2):
        counter = FlopCounterMode(display=False)
        with counter:
            generate(model, prompt, new, use_cache=use_cache)
        counts.append(counter.get_total_flops())
    return counts[1] - counts[0]


def decode_flops(out: Path) -> None:
    model = build_model(TINY, 0)
    contexts = [64, 128, 256, 512, 768]
    cached = [_decode_flops(model, n, True) / 1e6 for n in contexts]
    recomputed = [_decode_flops(model, n, False) / 1e6 for n in contexts]
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    ax.plot(contexts, recomputed, "o-", color="tab:red", label="no cache: the whole sequence again")
    ax.plot(contexts, cached, "o-", color="tab:blue", label="KV cache: the new token only")
    ax.set_xlabel("context length L (tokens)")
    ax.set_ylabel("MFLOP per decode step")
    ax.set_yscale("log")
    ax.set_title("TinyGPT, one decode step (FlopCounterMode)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "kv_cache_decode_flops.png", dpi=DPI)
    plt.close(fig)


def block_tables(out: Path) -> None:
    """A prompt of 10 tokens forked into 3 samples that then decode 3, 1 and 5 more tokens."""
    cache = PagedKVCache(num_blocks=12, block_size=4, num_layers=1, num_kv_heads=1, head_dim=1)
    cache.add_sequence(0)
    cache.append(0, 0, torch.zeros(10, 1, 1), torch.zeros(10, 1, 1))
    for child in (1, 2):
        cache.fork(0, child)
    for seq, new in ((0, 3), (1, 1), (2, 5)):
        cache.append(seq, 0, torch.ones(new, 1, 1), torch.ones(new, 1, 1))
    lengths = {0: 13, 1: 11, 2: 15}
    tables = {seq: cache.block_table(seq) for seq in (0, 1, 2)}
    owners: dict[int, list[int]] = {}
    for seq, table in tables.items():
        for block in table:
            owners.setdefault(block, []).append(seq)

    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.2), gridspec_kw={"width_ratios": [1, 1.3]})
    for row, (seq, table) in enumerate(tables.items()):
        y = 2 - row
        left.text(-0.3, y + 0.4, f"seq {seq}", ha="right", va="center", fontsize=9)
        for i, block in enumerate(table):
            shared = len(owners[block]) > 1
            left.add_patch(Rectangle((i, y), 0.9, 0.8, color="tab:orange" if shared else "tab:blue", alpha=0.8))
            left.text(i + 0.45, y + 0.4, str(block), ha="center", va="center", color="white", fontsize=10)
        left.text(len(table) + 0.1, y + 0.4, f"{lengths[seq]} tokens", va="center", fontsize=8)
    left.set_xlim(-1.5, 5.5)
    left.set_ylim(-0.2, 3)
    left.axis("off")
    left.set_title("block tables (orange: shared prompt blocks)", fontsize=9)

    for block in range(12):
        x, y = block % 6, 1 - block // 6
        holders = owners.get(block)
        color = "lightgrey" if not holders else ("tab:orange" if len(holders) > 1 else "tab:blue")
        right.add_patch(Rectangle((x, y), 0.9, 0.8, color=color, alpha=0.8))
        label = f"{block}\n" + (",".join(map(str, holders)) if holders else "free")
        right.text(x + 0.45, y + 0.4, label, ha="center", va="center", fontsize=8)
    right.set_xlim(-0.2, 6)
    right.set_ylim(-0.2, 2)
    right.axis("off")
    right.set_title(f"the pool: block, owners ({cache.num_free_blocks()} free of 12)", fontsize=9)
    fig.tight_layout()
    fig.savefig(out / "kv_cache_block_tables.png", dpi=DPI)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=REPO / "lectures" / "figures")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    bytes_per_token(args.out)
    decode_flops(args.out)
    block_tables(args.out)
    print(f"wrote 3 figures to {args.out}")


if __name__ == "__main__":
    main()
