"""Wasteful: generate ignores use_cache and recomputes the whole sequence every step."""
# target: generate.py

_generate_with_cache = generate


def generate(model, prompt_ids, max_new_tokens, use_cache=True, temperature=0.0, seed=None):
    return _generate_with_cache(model, prompt_ids, max_new_tokens, False, temperature, seed)
