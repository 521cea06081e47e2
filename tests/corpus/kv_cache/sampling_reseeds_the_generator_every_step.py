"""generate re-seeds its torch.Generator at every step instead of once: at temperature 0.8 this
model's next token is nearly certain, so the same tokens come out; at a high temperature they do not."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: generate.py
# select: high_entropy
# fails: high_entropy
# kind:
# message: sampling at temperature 4.0


def _choose(logits, temperature, generator):
    if temperature == 0:
        return logits.argmax(dim=-1)
    fresh = torch.Generator(logits.device).manual_seed(generator.initial_seed())  # the bug: a new stream each step
    probs = torch.softmax(logits / temperature, dim=-1)
    return torch.multinomial(probs, 1, generator=fresh)[:, 0]
