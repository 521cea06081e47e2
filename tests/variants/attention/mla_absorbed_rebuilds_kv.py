"""Wasteful: forward_absorbed rebuilds every head's keys and values from the latent, as the naive
forward does. Correct, but attention then runs over head_dim per head instead of the small
latent, and k and v (seq x heads x head_dim each) exist in memory: what absorption removes."""
# target: mla.py


def _forward_absorbed_by_rebuilding(self, x, causal=True):
    return self.forward(x, causal=causal)


MultiHeadLatentAttention.forward_absorbed = _forward_absorbed_by_rebuilding
