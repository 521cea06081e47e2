"""normalisation "token" computed as each sequence's mean then the mean over sequences: the paper's
normalisation under DAPO's name, so long completions weigh as much as short ones. Refused by the
per-token test; the per-sequence test passes."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: losses.py
# select: grpo_loss_per_token or grpo_loss_per_sequence
# fails: test_grpo_loss_per_token_divides_by_the_number_of_masked_tokens
# kind:
# message: normalisation 'token' \(DAPO\).*divided by their number

_grpo_loss_of_the_reference = grpo_loss


def grpo_loss(logprobs, old_logprobs, reference_logprobs, advantages, mask, epsilon=0.2, beta=0.04,
              normalisation="sequence", epsilon_high=None):  # fmt: skip
    return _grpo_loss_of_the_reference(
        logprobs, old_logprobs, reference_logprobs, advantages, mask, epsilon, beta, "sequence", epsilon_high
    )
