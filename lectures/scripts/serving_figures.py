"""Generate the figures of lecture 10-serving.

    python lectures/scripts/serving_figures.py [--out DIR]

Writes serving_batching.png, serving_memory_wall.png, serving_prefix_cache.png and
serving_speculative.png into DIR (default: <repo>/lectures/figures). Deterministic, no network,
a few seconds on a CPU.

Batches, forward calls and prompt tokens come from the course's Scheduler and ServingModel
(solutions/serving) on the given TinyGPT; static batching is the same engine fed one batch at a
time. Speculative decoding's tokens per target call are measured with speculative_generate on
bigram models of known acceptance rate and drawn beside expected_tokens_per_step. The memory
wall is arithmetic on published figures (a 7B model in 16 bits on an 80 GB GPU).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt
import torch

matplotlib.use("Agg")

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "solutions" / "serving"))

from paged import build_model  # noqa: E402
from scheduler import Scheduler  # noqa: E402
from speculative import BigramModel, expected_tokens_per_step, speculative_generate  # noqa: E402

DPI = 120
CONFIG = {"vocab_size": 97, "max_seq_len": 256, "num_layers": 2, "d_model": 32, "num_heads": 4, "num_kv_heads": 2}
# 12 requests: prompts of 6 tokens, outputs alternating 2 and 16 tokens; 16 tokens per step.
WORKLOAD = [(6, 2 if i % 2 == 0 else 16) for i in range(12)]
BUDGET, BLOCK, BLOCKS = 16, 4, 64


def _prompt(i: int, length: int) -> list[int]:
    return [(7 * i + 3 * j + 1) % CONFIG["vocab_size"] for j in range(length)]


def continuous_batches() -> list[int]:
    """Requests in each step's batch, all 12 queued at the start."""
    scheduler = Scheduler(build_model(CONFIG, 0), BLOCKS, BLOCK, BUDGET)
    for i, (length, new) in enumerate(WORKLOAD):
        scheduler.add_request(i, _prompt(i, length), new)
    sizes = []
    while batch := scheduler.step():
        sizes.append(len(batch))
    return sizes


def static_batches() -> list[int]:
    """The same engine fed a new batch only when the last one has finished (static batching)."""
    scheduler = Scheduler(build_model(CONFIG, 0), BLOCKS, BLOCK, BUDGET)
    per_batch = 6  # about what continuous batching holds at once here
    sizes = []
    for start in range(0, len(WORKLOAD), per_batch):
        for i in range(start, min(start + per_batch, len(WORKLOAD))):
            scheduler.add_request(i, _prompt(i, WORKLOAD[i][0]), WORKLOAD[i][1])
        while batch := scheduler.step():
            sizes.append(len(batch))
    return sizes


def batching(out: Path) -> None:
    static, continuous = static_batches(), continuous_batches()
    fig, ax = plt.subplots(figsize=(8, 3.4))
    ax.step(range(1, len(static) + 1), static, where="mid", label=f"static: {len(static)} forward calls")
    ax.step(
        range(1, len(continuous) + 1), continuous, where="mid", label=f"continuous: {len(continuous)} forward calls"
    )
    ax.set_xlabel("step (one model forward)")
    ax.set_ylabel("requests in the batch")
    ax.set_title("12 requests, outputs of 2 and 16 tokens, 16 tokens per step")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "serving_batching.png", dpi=DPI)
    plt.close(fig)


def memory_wall(out: Path) -> None:
    """Decode tokens/s of a 7B model (16-bit) on an 80 GB, 3.35 TB/s, 989 TFLOP/s GPU, by batch size."""
    weights, bandwidth, flops = 14e9, 3.35e12, 989e12
    kv_per_token, context = 512 * 2**10, 1024  # Llama-2-7B: 512 KiB of keys and values per token
    batches = torch.arange(1, 513).double()
    step_time = torch.maximum((weights + batches * context * kv_per_token) / bandwidth, batches * 2 * 7e9 / flops)
    free = 80e9 - weights
    fig, ax = plt.subplots(figsize=(8, 3.6))
    ax.plot(batches, batches / step_time, label="decode tokens/s (bound by memory traffic)")
    for label, used, style in [
        ("contiguous slabs, 20-40% of KV memory used", 0.3, ":"),
        ("paged, ~96% used", 0.96, "--"),
    ]:
        limit = free * used / (context * kv_per_token)
        ax.axvline(limit, color="gray", linestyle=style, label=f"{label}: batch <= {limit:.0f}")
    ax.set_xlabel("sequences in the batch (context 1024)")
    ax.set_ylabel("tokens per second")
    ax.set_title("Decode reads every weight each step; the KV memory caps the batch")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "serving_memory_wall.png", dpi=DPI)
    plt.close(fig)


def prefix_cache(out: Path) -> None:
    """Prompt tokens computed for 8 requests of 32-token prompts sharing a prefix, by its length."""
    shared_lengths = [0, 8, 16, 24, 28]
    computed = []
    for shared in shared_lengths:
        model = build_model(CONFIG, 0)
        scheduler = Scheduler(model, BLOCKS, BLOCK, 64)
        prefix = _prompt(99, shared)
        scheduler.add_request(0, prefix + _prompt(0, 32 - shared), 1)
        scheduler.step()
        for i in range(1, 8):
            scheduler.add_request(i, prefix + _prompt(i, 32 - shared), 1)
        scheduler.run_until_done()
        computed.append(model.tokens_computed)
    fig, ax = plt.subplots(figsize=(7, 3.4))
    ax.plot([s / 32 for s in shared_lengths], computed, "o-", label="with prefix caching (measured)")
    ax.axhline(8 * 32, color="gray", linestyle="--", label="without: 8 x 32")
    ax.set_xlabel("fraction of each prompt shared with request 0")
    ax.set_ylabel("prompt tokens computed")
    ax.set_ylim(0, 8 * 32 * 1.1)
    ax.set_title("Later requests compute only what follows the cached blocks")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "serving_prefix_cache.png", dpi=DPI)
    plt.close(fig)


def _known_acceptance(alpha: float) -> tuple[BigramModel, BigramModel]:
    target = torch.tensor([[0.5, 0.3, 0.2, 0.0], [0.2, 0.5, 0.3, 0.0], [0.3, 0.2, 0.5, 0.0], [0.4, 0.3, 0.3, 0.0]])
    draft = alpha * target + (1 - alpha) * torch.tensor([0.0, 0.0, 0.0, 1.0])
    return BigramModel(target), BigramModel(draft)


def speculative(out: Path) -> None:
    alphas = [0.3, 0.5, 0.7, 0.8, 0.9, 0.95]
    fig, ax = plt.subplots(figsize=(7, 3.6))
    grid = [a / 100 for a in range(0, 100)]
    for gamma in (1, 2, 4, 8):
        ax.plot(grid, [expected_tokens_per_step(a, gamma) for a in grid], label=f"gamma = {gamma}")
        measured = []
        for alpha in alphas:
            target, draft = _known_acceptance(alpha)
            generator = torch.Generator().manual_seed(gamma)
            speculative_generate(target, draft, torch.tensor([0]), gamma, 300, generator)
            measured.append(300 / target.calls)
        ax.plot(alphas, measured, "k.", markersize=6)
    ax.set_xlabel("acceptance rate alpha")
    ax.set_ylabel("tokens per target forward")
    ax.set_title("(1 - alpha^(gamma+1)) / (1 - alpha); dots: measured over 300 tokens")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "serving_speculative.png", dpi=DPI)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "lectures" / "figures")
    out = parser.parse_args().out
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)
    batching(out)
    memory_wall(out)
    prefix_cache(out)
    speculative(out)


if __name__ == "__main__":
    main()
