"""The hidden suite's own float64 formulas for losses.py, written apart from the reference solution
(per completion, with explicit loops where the solution is vectorised), so that both are checked
against each other. The project test tests/test_post_training_losses.py checks the solution
against TRL 1.16.0."""

from __future__ import annotations

import math

import torch


def logprobs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """log softmax at the targets, in float64."""
    return torch.log_softmax(logits.double(), dim=-1).gather(-1, targets.long().unsqueeze(-1)).squeeze(-1)


def ulp(values: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The spacing of `dtype`'s numbers around each of `values` (float64): 2^floor(log2|v|) * eps."""
    magnitude = values.abs().clamp(min=torch.finfo(dtype).tiny)
    return torch.exp2(torch.floor(torch.log2(magnitude))) * torch.finfo(dtype).eps


def dpo(pc, pr, rc, rr, beta: float) -> tuple[float, list[float], list[float]]:
    """The sigmoid loss as log(1 + exp(-z)), pair by pair, in Python floats (math.log1p of a
    small term: stable for any margin)."""
    losses, chosen, rejected = [], [], []
    for a, b, c, d in zip(pc.tolist(), pr.tolist(), rc.tolist(), rr.tolist()):
        z = beta * ((a - c) - (b - d))
        losses.append(math.log1p(math.exp(-z)) if z > 0 else -z + math.log1p(math.exp(z)))
        chosen.append(beta * (a - c))
        rejected.append(beta * (b - d))
    return sum(losses) / len(losses), chosen, rejected


def advantages(rewards: torch.Tensor, group_size: int, scale: bool = True, eps: float = 1e-4) -> torch.Tensor:
    """Group by group with Python's statistics of the group: (r - mean) / (std + eps), the
    unbiased std; a group of equal rewards gives exact zeros."""
    out = []
    values = rewards.double().tolist()
    for start in range(0, len(values), group_size):
        group = values[start : start + group_size]
        if all(v == group[0] for v in group):
            out += [0.0] * group_size
            continue
        mean = math.fsum(group) / group_size
        std = math.sqrt(math.fsum((v - mean) ** 2 for v in group) / (group_size - 1))
        out += [(v - mean) / (std + eps) if scale else v - mean for v in group]
    return torch.tensor(out, dtype=torch.float64)


def grpo_per_token(logp, old, ref, adv, epsilon: float, epsilon_high: float, beta: float) -> torch.Tensor:
    """loss_t of every token (N, T), in float64: the clipped surrogate's two branches written as
    a case analysis (which one the min picks), plus beta times k3."""
    logp, old = logp.double(), old.double()
    ratio = torch.exp(logp - old)
    a = adv.double().unsqueeze(1).expand_as(ratio)
    low, high = 1 - epsilon, 1 + epsilon_high
    # A > 0: the objective is capped once the ratio passes 1 + epsilon_high; A < 0: once it
    # falls below 1 - epsilon. Elsewhere the unclipped ratio * A.
    capped_above = (a > 0) & (ratio > high)
    capped_below = (a < 0) & (ratio < low)
    objective = torch.where(capped_above, high * a, torch.where(capped_below, low * a, ratio * a))
    loss = -objective
    if beta:
        r = ref.double()
        loss = loss + beta * (torch.exp(r - logp) - (r - logp) - 1)
    return loss


def grpo(logp, old, ref, adv, mask, epsilon=0.2, beta=0.04, normalisation="sequence", epsilon_high=None):
    """GRPO's loss, completion by completion."""
    per_token = grpo_per_token(logp, old, ref, adv, epsilon, epsilon if epsilon_high is None else epsilon_high, beta)
    m = mask.double()
    if normalisation == "sequence":
        rows = []
        for i in range(per_token.shape[0]):
            count = float(m[i].sum())
            rows.append(float((per_token[i] * m[i]).sum()) / count if count else 0.0)
        return torch.tensor(sum(rows) / len(rows), dtype=torch.float64)
    count = float(m.sum())
    return torch.tensor(float((per_token * m).sum()) / count if count else 0.0, dtype=torch.float64)


def grpo_batch(gen: torch.Generator, n: int = 6, t: int = 11, empty_rows: tuple[int, ...] = (3,)) -> dict:
    """N completions of T positions in float64: each row a prompt of 1 to 3 tokens (mask 0), a
    completion of 1 to T - 4 tokens (mask 1), then padding (mask 0); the rows in empty_rows have
    no completion token. Ratios spread from about 0.6 to 1.6 (both clip boundaries crossed),
    advantages of both signs and one of exactly 0, a reference a little off the policy."""
    mask = torch.zeros(n, t, dtype=torch.bool)
    for i in range(n):
        start = int(torch.randint(1, 4, (1,), generator=gen))
        length = int(torch.randint(1, t - 3, (1,), generator=gen))
        if i not in empty_rows:
            mask[i, start : start + length] = True
    logp = -3 * torch.rand(n, t, generator=gen, dtype=torch.float64)
    old = logp + 0.5 * (torch.rand(n, t, generator=gen, dtype=torch.float64) * 2 - 1)
    ref = logp + 0.4 * torch.randn(n, t, generator=gen, dtype=torch.float64)
    adv = torch.randn(n, generator=gen, dtype=torch.float64)
    adv[-1] = 0.0
    return {"logprobs": logp, "old": old, "ref": ref, "adv": adv, "mask": mask}
