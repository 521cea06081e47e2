"""speculative_generate takes the target's argmax after a rejection instead of drawing from norm(max(0, p - q)).

Where the residual is one-hot at the argmax (the draft-misses case) no test can tell; where it is
spread over two tokens it fails."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: speculative.py
# select: distribution_over_sequences
# fails: spread-residual
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
            return [*emitted, int(p.argmax())]  # the bug: the argmax, not a draw from the residual
        emitted.append(x)
    return [*emitted, _pick(target_probs[len(drafted)], generator)]
