"""completion_logprobs in the logits' own 16-bit dtype: the target's logit minus a log-sum-exp
itself rounded to bfloat16 (a step of 0.5 near 100). Right in float32 and float64; refused by the
16-bit test, with a message that says to compute in float32."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: losses.py
# select: completion_logprobs_equal or 16_bit
# fails: test_completion_logprobs_of_16_bit_logits_are_computed_in_float32_and_rounded_once
# kind:
# message: off by more than one step.*Compute each sequence in float32


def completion_logprobs(logits, targets):
    rows = []
    for row, row_targets in zip(logits, targets):
        picked = row.gather(-1, row_targets.long().unsqueeze(-1)).squeeze(-1)
        rows.append(picked - torch.logsumexp(row, dim=-1))
    return torch.stack(rows)
