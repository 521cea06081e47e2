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
    ### BEGIN SOLUTION
    if isinstance(prompt_ids, torch.Tensor):
        ids, mask = prompt_ids, torch.ones(prompt_ids.shape, dtype=torch.bool)
    else:
        ids, mask = left_pad([p.cpu() for p in prompt_ids])
    weight = model.token_embedding.weight
    ids, mask = ids.to(weight.device), mask.to(weight.device)  # run where the model is
    generator = torch.Generator(weight.device).manual_seed(seed) if temperature > 0 else None
    config = model.config
    cache = None
    if use_cache:
        batch, prompt_len = ids.shape
        size = (config.num_layers, batch, prompt_len + max_new_tokens, config.num_kv_heads, config.head_dim)
        cache = KVCache(*size, dtype=weight.dtype, device=weight.device)

    tokens, logits = [], []
    step_input = ids  # prefill: the whole prompt
    for _ in range(max_new_tokens):
        if use_cache:
            last = model(step_input, cache=cache, attention_mask=mask)[:, -1]
        else:
            last = model(ids, attention_mask=mask)[:, -1]
        token = _choose(last, temperature, generator)
        tokens.append(token)
        logits.append(last)
        ids = torch.cat([ids, token[:, None]], dim=1)
        mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
        step_input = token[:, None]  # decode: only the newest token
    return torch.stack(tokens, dim=1), torch.stack(logits, dim=1)
    ### END SOLUTION


### BEGIN SOLUTION
def _choose(logits: torch.Tensor, temperature: float, generator: torch.Generator | None) -> torch.Tensor:
    """Greedy at temperature 0, else one multinomial draw per row of softmax(logits / T)."""
    if temperature == 0:
        return logits.argmax(dim=-1)
    probs = torch.softmax(logits / temperature, dim=-1)
    return torch.multinomial(probs, 1, generator=generator)[:, 0]


### END SOLUTION
