"""Wasteful: the target scores each drafted token in a call of its own (k + 1 target calls per
step instead of one), as autoregressive verification would. Same tokens, many more calls."""
# target: speculative.py

_verify_once = _verify


def speculative_generate(target, draft, prompt, gamma, max_new_tokens, generator=None):
    if gamma < 1 or max_new_tokens < 1 or prompt.numel() == 0:
        raise ValueError("gamma and max_new_tokens must be at least 1 and the prompt non-empty")
    sequence = [int(t) for t in prompt]
    generated = []
    while len(generated) < max_new_tokens:
        k = min(gamma, max_new_tokens - len(generated))
        drafted, draft_probs = _draft(draft, sequence + generated, k, generator)
        context = sequence + generated
        rows = [target(torch.tensor([context + drafted[:i]]))[0, -1] for i in range(k + 1)]
        target_probs = F.softmax(torch.stack(rows).double(), dim=-1)
        generated += _verify_once(drafted, draft_probs, target_probs, generator)
    return torch.tensor(generated[:max_new_tokens], dtype=torch.long)
