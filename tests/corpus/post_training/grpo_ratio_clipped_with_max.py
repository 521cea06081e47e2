"""GRPO's surrogate with max instead of min: the clipped and unclipped objectives swapped, so the
loss takes the optimistic bound and a ratio far outside [1 - epsilon, 1 + epsilon] keeps pushing.
Refused by the loss's value tests; the masked-token test still passes."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: losses.py
# select: grpo_loss_per_sequence or grpo_loss_ignores_tokens
# fails: test_grpo_loss_per_sequence_is_the_clipped_objective_plus_k3_averaged_per_completion
# kind:
# message: normalisation 'sequence'.*epsilon 0.2, beta 0.04: got


def grpo_loss(logprobs, old_logprobs, reference_logprobs, advantages, mask, epsilon=0.2, beta=0.04,
              normalisation="sequence", epsilon_high=None):  # fmt: skip
    epsilon_high = epsilon if epsilon_high is None else epsilon_high
    mask = mask.to(logprobs.dtype)
    ratio = torch.exp(logprobs - old_logprobs.detach())
    clipped = torch.clamp(ratio, 1 - epsilon, 1 + epsilon_high)
    advantage = advantages.detach().unsqueeze(1)
    per_token = -torch.max(ratio * advantage, clipped * advantage)
    if beta != 0:
        gap = reference_logprobs.detach() - logprobs
        per_token = per_token + beta * (torch.exp(gap) - gap - 1)
    if normalisation == "sequence":
        return ((per_token * mask).sum(1) / mask.sum(1).clamp(min=1)).mean()
    return (per_token * mask).sum() / mask.sum().clamp(min=1)
