"""Trusted references for the serving suites, run in the grader's process, never importing the
submission: sequential generation with the given TinyGPT (the whole sequence every step), the
FLOPs of ServingModel's forward calls from their shapes, the forward calls of the documented
continuous-batching policy, and the exact distribution of a bigram target over sequences."""

from __future__ import annotations

import contextlib
import itertools
import math
from collections.abc import Iterator

import torch

from grader.models.tiny_gpt import TinyGPT, TinyGPTConfig
from grader.sandbox import Saved, Step

CONFIG = {"vocab_size": 97, "max_seq_len": 256, "num_layers": 2, "d_model": 32, "num_heads": 4, "num_kv_heads": 2}
MODEL_SEED = 3


def model(seed: int = MODEL_SEED, config: dict | None = None) -> TinyGPT:
    return TinyGPT.from_seed(TinyGPTConfig(**(config or CONFIG)), seed, torch.float64)


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """Run a tiny model on one thread: the grader's process shares the machine with the workers,
    and intra-op threads fighting over busy cores make a 0.2 ms forward take 10 ms or more."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


@one_thread()
@torch.no_grad()
def sequential(
    net: TinyGPT, prompt: list[int], max_new_tokens: int, temperature: float = 0.0, seed: int | None = None
) -> list[int]:
    """One request alone: the whole sequence through the model every step; greedy, or one
    torch.multinomial(softmax(logits / T), 1, generator) per token with the request's generator."""
    ids = torch.tensor([prompt])
    generator = torch.Generator().manual_seed(seed) if temperature > 0 else None
    out = []
    for _ in range(max_new_tokens):
        last = net(ids)[0, -1]
        if temperature == 0:
            token = int(last.argmax())
        else:
            token = int(torch.multinomial(torch.softmax(last / temperature, -1), 1, generator=generator))
        out.append(token)
        ids = torch.cat([ids, torch.tensor([[token]])], 1)
    return out


def forward_flops(shapes: list[tuple[int, int, int]], config: dict = CONFIG) -> int:
    """FLOPs FlopCounterMode counts for ServingModel.forward calls of (rows, width, past): the
    linear layers on rows x width tokens and attention of each of them over past + width keys."""
    d, heads, kv_heads = config["d_model"], config["num_heads"], config["num_kv_heads"]
    head_dim, vocab = d // heads, config["vocab_size"]
    total = 0
    for rows, width, past in shapes:
        tokens = rows * width
        linear = 2 * tokens * d * (heads * head_dim + 2 * kv_heads * head_dim + heads * head_dim + 8 * d)
        attention = 2 * 2 * rows * heads * width * (past + width) * head_dim
        total += config["num_layers"] * (linear + attention) + 2 * tokens * d * vocab
    return total


def continuous_forward_calls(requests: list[tuple[int, int]], budget: int) -> int:
    """Forward calls of the documented policy for (prompt length, max_new_tokens) requests all
    queued at the start, with blocks to spare: each step, the running requests oldest first and
    then the waiting ones take min(uncomputed tokens, budget left)."""
    state = [[length, new, 0] for length, new in requests]  # tokens so far, still to generate, computed
    waiting, running, calls = list(range(len(requests))), [], 0
    while waiting or running:
        left = budget
        for index in running + waiting:
            if left == 0:
                break
            tokens, _, computed = state[index]
            take = min(tokens - computed, left)
            left -= take
            state[index][2] += take
            if index in waiting:
                waiting.remove(index)
                running.append(index)
            if state[index][2] == tokens:  # reached the last token: one more is generated
                state[index][0] += 1
                state[index][1] -= 1
        running = [i for i in running if state[i][1] > 0]
        calls += 1
    return calls


def exact_distribution(probs: torch.Tensor, last: int, horizon: int) -> dict[tuple[int, ...], float]:
    """P(sequence) of the next `horizon` tokens of a bigram model after token `last`."""
    out = {}
    for sequence in itertools.product(range(probs.shape[0]), repeat=horizon):
        p, previous = 1.0, last
        for token in sequence:
            p, previous = p * float(probs[previous, token]), token
        if p > 0:
            out[sequence] = p
    return out


def chi_square(samples: torch.Tensor, distribution: dict[tuple[int, ...], float]) -> tuple[float, int, float]:
    """(statistic, degrees of freedom, p-value) of Pearson's test of the rows of `samples`
    against `distribution`; a sequence outside it gives an infinite statistic."""
    counts: dict[tuple[int, ...], int] = {}
    for row in samples.tolist():
        counts[tuple(row)] = counts.get(tuple(row), 0) + 1
    if set(counts) - set(distribution):
        return math.inf, len(distribution) - 1, 0.0
    n = len(samples)
    statistic = sum((counts.get(s, 0) - n * p) ** 2 / (n * p) for s, p in distribution.items())
    dof = len(distribution) - 1
    # The chi-square survival function: the regularised upper incomplete gamma Q(dof/2, x/2).
    p_value = float(torch.special.gammaincc(torch.tensor(dof / 2, dtype=torch.float64), torch.tensor(statistic / 2)))
    return statistic, dof, p_value


def scheduler_script(
    blocks: int, block_size: int, budget: int, events: list[tuple], measure: tuple = (), config: dict = CONFIG
) -> list[Step]:
    """Build the model (`config`, MODEL_SEED) and a Scheduler, play `events` (("add", id, prompt,
    max_new[, temperature, seed]) through call_or_error, ("step",) or ("counts",) for
    model.counts()), then model.counts(), trace_steps (measured with the `measure` probes),
    run_until_done and model.counts() again."""
    steps = [
        Step("build_model", (config, MODEL_SEED, "float64"), save_as="model", send_back=False),
        Step("Scheduler", (Saved("model"), blocks, block_size, budget), save_as="scheduler", send_back=False),
    ]
    for event in events:
        if event[0] == "add":
            steps.append(Step("call_or_error", (Saved("scheduler"), "add_request", *event[1:])))
        elif event[0] == "counts":
            steps.append(Step("model.counts"))
        else:
            steps.append(Step("scheduler.step"))
    steps.append(Step("model.counts"))
    steps.append(Step("trace_steps", (Saved("scheduler"),), measure=measure))
    steps.append(Step("scheduler.run_until_done"))
    steps.append(Step("model.counts"))
    return steps
