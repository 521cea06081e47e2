"""Wrong: the acceptance test is inverted, accepting a drafted token with probability
min(1, q(x) / p(x)), i.e. always when the draft is more confident than the target (q > p). The
tokens are then distributed neither as the target nor as the draft."""
# target: speculative.py


def _verify(drafted, draft_probs, target_probs, generator):
    emitted = []
    for x, q, p in zip(drafted, draft_probs, target_probs):
        if generator is None:
            accept = x == int(p.argmax())
        else:
            u = torch.rand((), generator=generator, dtype=torch.float64)
            accept = bool(u * p[x] < q[x])
        if not accept:
            residual = (p - q).clamp(min=0)
            if generator is None or residual.sum() <= 0:
                residual = p
            return [*emitted, _pick(residual / residual.sum(), generator)]
        emitted.append(x)
    return [*emitted, _pick(target_probs[len(drafted)], generator)]
