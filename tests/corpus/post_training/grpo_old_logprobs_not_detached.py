"""grpo_loss that differentiates through old_logprobs: off policy, gradient reaches the sampling
policy's log-probabilities; on policy, with old_logprobs the very tensor logprobs, the ratio
exp(logprobs - logprobs) has zero gradient and the policy never moves. The loss's value is right;
refused by the gradient test."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: losses.py
# select: grpo_loss_per_sequence or grpo_loss_differentiates
# fails: test_grpo_loss_differentiates_only_logprobs
# kind:
# message: gradient reached \['old_logprobs'\]


def grpo_loss(logprobs, old_logprobs, reference_logprobs, advantages, mask, epsilon=0.2, beta=0.04,
              normalisation="sequence", epsilon_high=None):  # fmt: skip
    epsilon_high = epsilon if epsilon_high is None else epsilon_high
    mask = mask.to(logprobs.dtype)
    ratio = torch.exp(logprobs - old_logprobs)
    clipped = torch.clamp(ratio, 1 - epsilon, 1 + epsilon_high)
    advantage = advantages.detach().unsqueeze(1)
    per_token = -torch.min(ratio * advantage, clipped * advantage)
    if beta != 0:
        gap = reference_logprobs.detach() - logprobs
        per_token = per_token + beta * (torch.exp(gap) - gap - 1)
    if normalisation == "sequence":
        return ((per_token * mask).sum(1) / mask.sum(1).clamp(min=1)).mean()
    return (per_token * mask).sum() / mask.sum().clamp(min=1)
