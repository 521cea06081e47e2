"""generate recomputes the whole sequence every step, and patches torch's FlopCounterMode to report few FLOPs."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: generate.py
# select: decode_step
# fails: decode_step
# kind: forbidden
# message: changed torch\.utils\.flop_counter\.FlopCounterMode

from torch.utils.flop_counter import FlopCounterMode

_generate_with_cache = generate
FlopCounterMode.get_total_flops = lambda self: 1000


def generate(model, prompt_ids, max_new_tokens, use_cache=True, temperature=0.0, seed=None):
    return _generate_with_cache(model, prompt_ids, max_new_tokens, False, temperature, seed)
