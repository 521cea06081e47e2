"""The causal mask lets each query see one key too many: only causal cases differ."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: reference.py
# select: attention_matches_sdpa and float64
# fails: causal-q(?!1-)
# kind:
# message: elements differ


def causal_mask(seq_q, seq_k, device=None):
    i = torch.arange(seq_q, device=device)[:, None]
    j = torch.arange(seq_k, device=device)[None, :]
    return j <= i + (seq_k - seq_q) + 1
