# Your working copy: replace every `raise NotImplementedError` with your implementation.
# (Generated from the course's reference by `python -m grader sync`.)
"""Autoregressive generation with a KV cache (lecture 05-kv-cache, section 3).

Prefill runs the whole prompt through the model once, filling the cache; every decode step then
feeds only the newest token. Without a cache each step recomputes the whole sequence: the work
of step t grows with t (and its attention with t^2) instead of staying nearly constant.
"""

from __future__ import annotations

import torch
from cache import KVCache

from grader.models.tiny_gpt import TinyGPT, TinyGPTConfig

DTYPES = {"float32": torch.float32, "float64": torch.float64}


def build_model(config: dict, seed: int, dtype: str = "float32") -> TinyGPT:
    """Given: TinyGPT(TinyGPTConfig(**config)) with weights drawn from `seed`, in eval mode.

    The grader builds the very same model in its own process to compute reference tokens.
    """
    return TinyGPT.from_seed(TinyGPTConfig(**config), seed, DTYPES[dtype])


def left_pad(prompts: list[torch.Tensor], pad_id: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Given: (ids, mask) of shape (batch, longest): prompts aligned on the right, mask 1 on tokens."""
    longest = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), longest), pad_id, dtype=torch.long)
    mask = torch.zeros(len(prompts), longest, dtype=torch.bool)
    for row, prompt in enumerate(prompts):
        ids[row, longest - len(prompt) :] = prompt
        mask[row, longest - len(prompt) :] = True
    return ids, mask


@torch.no_grad()
def generate(
    model: TinyGPT,
    prompt_ids: torch.Tensor | list[torch.Tensor],
    max_new_tokens: int,
    use_cache: bool = True,
    temperature: float = 0.0,
    seed: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generate `max_new_tokens` tokens after each prompt; return (tokens, logits).

    prompt_ids: a (batch, prompt_len) tensor of token ids, or a list of 1-D tensors of different
    lengths, which are left-padded with `left_pad` and passed with their attention mask.
    tokens: (batch, max_new_tokens) int64, the new tokens only. logits: (batch, max_new_tokens,
    vocab), the model's logits at the last position of each step, from which that token was chosen.

    With use_cache: one prefill call of the model on the whole prompt with a KVCache of
    prompt_len + max_new_tokens positions (the model's dtype), then one call per new token
    feeding only that token. Without: every step calls the model on the whole sequence so far,
    without a cache. Both give the same tokens and (within rounding) the same logits.

    temperature 0: greedy, argmax of the logits. temperature > 0: sample from
    softmax(logits / temperature) with torch.multinomial(probs, 1, generator=g), one call per step
    on the (batch, vocab) probabilities, g = torch.Generator().manual_seed(seed).
    """
    raise NotImplementedError("implement generate (lectures/05-kv-cache.md, section 3)")


# (Write any helper functions you need here.)
