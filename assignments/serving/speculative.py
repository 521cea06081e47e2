# Your working copy: replace every `raise NotImplementedError` with your implementation.
# (Generated from the course's reference by `python -m grader sync`.)
"""Speculative decoding: a small draft model proposes, the target model verifies in one forward
(lecture 10-serving, section 6).

Speculative sampling (Leviathan et al. 2023; Chen et al. 2023) draws gamma tokens from the draft
q, scores them all with one forward of the target p, and accepts each drafted token x with
probability min(1, p(x) / q(x)). At the first rejection it draws from the residual
norm(max(0, p - q)) instead and stops; when all are accepted it draws one bonus token from p.
Every token is then distributed exactly as if the target had sampled it alone:
P(x) = q(x) min(1, p(x)/q(x)) + (1 - sum_y min(p(y), q(y))) * max(0, p(x) - q(x)) / (1 - sum_y min(p(y), q(y)))
     = min(p(x), q(x)) + max(0, p(x) - q(x)) = p(x).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from grader.models.tiny_gpt import TinyGPT, TinyGPTConfig


class BigramModel:
    """Given: a model whose next-token distribution depends only on the last token.

    BigramModel(probs) with probs a (vocab, vocab) tensor whose row t is the distribution of the
    token after t (rows sum to 1; zeros allowed). Called like TinyGPT: model(ids) with ids
    (batch, length) returns logits (batch, length, vocab), log(probs[ids]) (-inf where a
    probability is 0). `calls` counts the calls.
    """

    def __init__(self, probs: torch.Tensor) -> None:
        self.log_probs = torch.as_tensor(probs, dtype=torch.float64).log()
        self.vocab_size = self.log_probs.shape[0]
        self.calls = 0

    def __call__(self, ids: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return self.log_probs[ids]


def speculative_generate(
    target,
    draft,
    prompt: torch.Tensor,
    gamma: int,
    max_new_tokens: int,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Generate max_new_tokens tokens after `prompt` (1-D int64) by speculative decoding.

    target, draft: models called like TinyGPT, model(ids) with ids (1, length) -> logits
    (1, length, vocab); a token's distribution is softmax of the logits at the position before
    it. No KV cache: each call is given the whole sequence so far.

    Each step: the draft proposes k = min(gamma, tokens still to generate) tokens, one draft
    call each; then ONE target call on the sequence with all k drafted tokens scores them all
    (and the position after the last). Returns the (max_new_tokens,) int64 tensor of new tokens
    (a step's bonus token past max_new_tokens is dropped).

    generator given (sampling): draft tokens are drawn from q = softmax(draft logits); drafted
    token x is accepted with probability min(1, p(x) / q(x)), p = softmax(target logits);
    at the first rejection a token is drawn from max(0, p - q) normalised and the step ends;
    when all k are accepted a bonus token is drawn from p at the next position. Every draw uses
    `generator`, so the same seed gives the same tokens, and the tokens are distributed exactly
    as the target's own samples. generator None (greedy): the draft proposes its argmax tokens,
    a drafted token is accepted when it equals the target's argmax, the first one that does not
    is replaced by the target's argmax (and the step ends), and the bonus token is the target's
    argmax: the result equals greedy decoding with the target alone.

    Raises ValueError when gamma < 1, max_new_tokens < 1 or the prompt is empty.
    """
    raise NotImplementedError("implement speculative_generate (lectures/10-serving.md, section 6)")


# (Write any helper functions you need here.)


def expected_tokens_per_step(alpha: float, gamma: int) -> float:
    """Mean tokens one target forward yields when each drafted token is accepted with
    probability alpha, independently: (1 - alpha^(gamma + 1)) / (1 - alpha), and gamma + 1 at
    alpha = 1 (Leviathan et al. 2023). Raises ValueError unless 0 <= alpha <= 1 and gamma >= 1.
    """
    raise NotImplementedError("implement expected_tokens_per_step (lectures/10-serving.md, section 7)")


def sample_sequences(
    target, draft, prompt: torch.Tensor, gamma: int, max_new_tokens: int, runs: int, seed: int
) -> torch.Tensor:
    """Given (the grader uses it): `runs` calls of speculative_generate sharing one generator
    seeded with `seed`, stacked into a (runs, max_new_tokens) tensor, in one worker call."""
    generator = torch.Generator().manual_seed(seed)
    runs_out = [speculative_generate(target, draft, prompt, gamma, max_new_tokens, generator) for _ in range(runs)]
    return torch.stack(runs_out)


def count_target_calls(target, draft, prompt: torch.Tensor, gamma: int, max_new_tokens: int, seed: int) -> dict:
    """Given (the grader uses it): one seeded speculative_generate with BigramModels; returns
    {"tokens": the generated tokens, "target_calls": calls of target, "draft_calls": calls of draft}."""
    target.calls, draft.calls = 0, 0
    tokens = speculative_generate(target, draft, prompt, gamma, max_new_tokens, torch.Generator().manual_seed(seed))
    return {"tokens": tokens, "target_calls": target.calls, "draft_calls": draft.calls}


def build_tiny_gpt(config: dict, seed: int) -> TinyGPT:
    """Given: TinyGPT(TinyGPTConfig(**config)) with weights drawn from `seed`, float64, eval mode."""
    return TinyGPT.from_seed(TinyGPTConfig(**config), seed, torch.float64)
