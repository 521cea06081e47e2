"""The ring merges partial outputs by exp(lse) itself instead of by differences of log-sum-exps:
exact on small logits, but e^lse overflows to inf (and the output to NaN) once the logits pass
about 709 in float64, where subtracting the maximum, as the online softmax does, stays finite."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: ring.py
# select: ring_attention_stays_finite or ring_attention_matches_sdpa_on_the_whole_sequence
# fails: ring_attention_stays_finite_on_large_logits
# kind:
# message: float64 inputs, rank \d: output \(logits of about 1e3: merge by differences of log-sum-exps


def _merge(out, lse, block_out, block_lse):
    weight, block_weight = torch.exp(lse), torch.exp(block_lse)
    total = weight + block_weight
    merged = (weight.unsqueeze(-1) * out + block_weight.unsqueeze(-1) * block_out) / total.unsqueeze(-1)
    # rows that no key has reached yet (both log-sum-exps -inf) stay empty instead of 0 / 0
    return torch.where(total.unsqueeze(-1) > 0, merged, out), torch.log(total)
