"""The single-process reference of rl.py's GRPO loop, written from the formulas (lecture 16,
sections 6 and 8), for the hidden suite: no engine, no KV cache, no shards, no collectives.

Generation recomputes the whole sequence at every token with TinyGPT's own forward and samples
as engine.py's docstring says (inverse transform on softmax(logits / T) with one uniform per
token from the request's generator); the update runs the whole batch at once with Adam written
from its definition (Kingma and Ba: m_hat / (sqrt(v_hat) + eps)). Where the distributed step
gathers, reduce-scatters and syncs, this has one model; the two agree to float64 rounding.

`variant` builds the loops students write by mistake, to name the mistake in a failure:
"regenerate" (an off-policy loop that samples every batch with the current weights) and
"current_old" (old_logprobs from the policy being trained instead of the engine's).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from grader.models.tiny_gpt import TinyGPT, TinyGPTConfig

CONFIG = TinyGPTConfig(max_seq_len=32)
END = 0
PROMPT_LEN = 4
SCALE = 0.1


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """The grader's process shares the machine with the workers: intra-op threads fighting over
    busy cores make a forward of this tiny model many times slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def initial_model(seed: int) -> TinyGPT:
    model = TinyGPT.from_seed(CONFIG, seed, torch.float64)
    with torch.no_grad():
        model.token_embedding.weight.mul_(SCALE)
    return model


def prompts_of(seed: int, step: int, n: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(1_000_003 * seed + step)
    return torch.randint(1, CONFIG.vocab_size, (n, PROMPT_LEN), generator=generator)


@torch.no_grad()
def sample(model: TinyGPT, prompt: list[int], max_new: int, temperature: float, seed: int, end: int | None):
    generator = torch.Generator().manual_seed(seed)
    sequence, tokens, logprobs = list(prompt), [], []
    while len(tokens) < max_new and (not tokens or tokens[-1] != end):
        logits = model(torch.tensor([sequence]))[0, -1]
        probs = torch.softmax(logits / temperature, dim=-1)
        u = torch.rand((), generator=generator, dtype=probs.dtype)
        token = min(int((probs.cumsum(-1) <= u).sum()), probs.numel() - 1)
        tokens.append(token)
        logprobs.append(float(torch.log_softmax(logits, dim=-1)[token]))
        sequence.append(token)
    return tokens, logprobs


@one_thread()
def rollouts(model, prompts, group_size, max_new, temperature, seed, first_prompt=0, end=END) -> dict:
    rows = prompts.shape[0] * group_size
    ids = torch.full((rows, max_new), END if end is None else end, dtype=torch.long)
    mask = torch.zeros(rows, max_new, dtype=torch.long)
    logprobs = torch.zeros(rows, max_new, dtype=torch.float64)
    for row in range(rows):
        request = first_prompt * group_size + row
        tokens, lps = sample(
            model, prompts[row // group_size].tolist(), max_new, temperature, seed * 1_000_003 + request, end
        )
        ids[row, : len(tokens)] = torch.tensor(tokens)
        mask[row, : len(tokens)] = 1
        logprobs[row, : len(tokens)] = torch.tensor(lps, dtype=torch.float64)
    return {
        "prompt_ids": prompts.long().repeat_interleave(group_size, 0),
        "completion_ids": ids,
        "completion_mask": mask,
        "logprobs": logprobs,
    }


def reward(prompt_ids, completion_ids, mask) -> torch.Tensor:
    threshold = prompt_ids.double().mean(1, keepdim=True)
    good = (completion_ids.double() < threshold) & (completion_ids != END) & (mask == 1)
    return good.double().sum(1) / completion_ids.shape[1]


def token_logprobs(model, prompt_ids, completion_ids) -> torch.Tensor:
    logits = model(torch.cat([prompt_ids, completion_ids], 1))
    predicting = logits[:, prompt_ids.shape[1] - 1 : -1]  # position j predicts token j + 1
    return torch.log_softmax(predicting, -1).gather(-1, completion_ids[..., None])[..., 0]


class Adam:
    def __init__(self, parameters, lr, betas=(0.9, 0.999), eps=1e-8):
        self.parameters, self.lr, self.betas, self.eps, self.t = list(parameters), lr, betas, eps, 0
        self.m = [torch.zeros_like(p) for p in self.parameters]
        self.v = [torch.zeros_like(p) for p in self.parameters]

    @torch.no_grad()
    def step(self):
        self.t += 1
        b1, b2 = self.betas
        for p, m, v in zip(self.parameters, self.m, self.v):
            g = torch.zeros_like(p) if p.grad is None else p.grad
            m.copy_(b1 * m + (1 - b1) * g)
            v.copy_(b2 * v + (1 - b2) * g * g)
            p -= self.lr * (m / (1 - b1**self.t)) / ((v / (1 - b2**self.t)).sqrt() + self.eps)
            p.grad = None


def update(policy, reference, optimizer, batch, group_size, epsilon, beta, normalisation, variant=None) -> dict:
    """One GRPO update of `policy` on `batch`; the metrics from before it."""
    prompt_ids, completion_ids, mask = batch["prompt_ids"], batch["completion_ids"], batch["completion_mask"]
    rewards = reward(prompt_ids, completion_ids, mask)
    groups = rewards.view(-1, group_size)
    advantages = (groups - groups.mean(1, keepdim=True)) / (groups.std(1, keepdim=True) + 1e-4)
    equal = (groups == groups[:, :1]).all(1, keepdim=True)  # no signal: exactly 0
    advantages = torch.where(equal, torch.zeros_like(advantages), advantages).reshape(-1, 1)
    logp = token_logprobs(policy, prompt_ids, completion_ids)
    with torch.no_grad():
        ref = token_logprobs(reference, prompt_ids, completion_ids)
    old = logp.detach() if variant == "current_old" else batch["logprobs"]
    ratio = torch.exp(logp - old)
    surrogate = torch.min(ratio * advantages, ratio.clamp(1 - epsilon, 1 + epsilon) * advantages)
    k3 = torch.exp(ref - logp) - (ref - logp) - 1
    per_token = (-surrogate + beta * k3) * mask
    sequence_mean = (per_token.sum(1) / mask.sum(1)).mean()
    loss = sequence_mean if normalisation == "sequence" else per_token.sum() / mask.sum()
    loss.backward()
    optimizer.step()
    return {
        "mean_reward": float(rewards.mean()),
        "kl": float((k3.detach() * mask).sum() / mask.sum()),
        "loss": float(loss.detach()),
    }


@one_thread()
def train(
    seed: int,
    steps: int,
    num_prompts: int,
    group_size: int,
    max_new: int,
    temperature: float = 1.0,
    off_policy: bool = False,
    lr: float = 1e-2,
    epsilon: float = 0.2,
    beta: float = 0.04,
    normalisation: str = "sequence",
    variant: str | None = None,
) -> dict:
    """run_grpo in one process: {"metrics": per step, "weights": name -> the final value,
    "batches": the rollouts each step trained on}."""
    policy = initial_model(seed).requires_grad_(True)
    reference = initial_model(seed).requires_grad_(False)
    optimizer = Adam(policy.parameters(), lr)

    def batch(b: int) -> dict:
        return rollouts(policy, prompts_of(seed, b, num_prompts), group_size, max_new, temperature, seed + b)

    metrics, trained = [], []
    pending = batch(0) if off_policy and variant != "regenerate" else None
    for k in range(steps):
        if off_policy and variant != "regenerate":
            current, pending = pending, (batch(k + 1) if k + 1 < steps else None)
        else:
            current = batch(k)
        trained.append(current)
        metrics.append(update(policy, reference, optimizer, current, group_size, epsilon, beta, normalisation, variant))
    weights = {name: p.detach().clone() for name, p in policy.named_parameters()}
    return {"metrics": metrics, "weights": weights, "batches": trained}
