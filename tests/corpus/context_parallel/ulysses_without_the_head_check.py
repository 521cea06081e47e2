"""Ulysses that does not check the head count: with 3 heads on 2 ranks the reshape into p groups
of heads fails with a RuntimeError from torch, not the ValueError naming the argument that the
docstring promises."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: ulysses.py
# select: ulysses_refuses_heads
# fails: ulysses_refuses_heads
# kind:
# message: expected ValueError, got


def ulysses_attention(q, k, v, causal=False, group=None):
    q, k, v = (_SequenceToHeads.apply(x, group) for x in (q, k, v))
    positions = torch.arange(q.shape[2], device=q.device) if causal else None
    out, _ = attention_block(q, k, v, positions, positions)
    return _HeadsToSequence.apply(out, group)
