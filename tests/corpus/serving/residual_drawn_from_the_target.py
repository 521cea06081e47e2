"""speculative_generate draws the correction after a rejection from p instead of
norm(max(0, p - q)): the accepted mass is counted twice, and the tokens are not the target's."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: speculative.py
# select: distribution_over_sequences
# fails: distribution_over_sequences
# kind:
# message: not distributed as the target's


def _verify(drafted, draft_probs, target_probs, generator):
    emitted = []
    for x, q, p in zip(drafted, draft_probs, target_probs):
        if generator is None:
            accept = x == int(p.argmax())
        else:
            u = torch.rand((), generator=generator, dtype=torch.float64)
            accept = bool(u * q[x] < p[x])
        if not accept:
            return [*emitted, _pick(p, generator)]  # the bug: p, not max(0, p - q) normalised
        emitted.append(x)
    return [*emitted, _pick(target_probs[len(drafted)], generator)]
