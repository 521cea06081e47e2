"""The KL penalty with the k1 estimator, logprobs - reference_logprobs: unbiased but negative on
half the tokens and of high variance, where GRPO uses k3 = exp(ref - logp) - (ref - logp) - 1.
Refused by the tests with beta > 0; the same loss with beta 0 passes."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: losses.py
# select: grpo_loss_per_sequence or grpo_loss_with_beta_zero
# fails: test_grpo_loss_per_sequence_is_the_clipped_objective_plus_k3_averaged_per_completion
# kind:
# message: beta 0.04


def grpo_loss(logprobs, old_logprobs, reference_logprobs, advantages, mask, epsilon=0.2, beta=0.04,
              normalisation="sequence", epsilon_high=None):  # fmt: skip
    epsilon_high = epsilon if epsilon_high is None else epsilon_high
    mask = mask.to(logprobs.dtype)
    ratio = torch.exp(logprobs - old_logprobs.detach())
    clipped = torch.clamp(ratio, 1 - epsilon, 1 + epsilon_high)
    advantage = advantages.detach().unsqueeze(1)
    per_token = -torch.min(ratio * advantage, clipped * advantage)
    if beta != 0:
        per_token = per_token + beta * (logprobs - reference_logprobs.detach())
    if normalisation == "sequence":
        return ((per_token * mask).sum(1) / mask.sum(1).clamp(min=1)).mean()
    return (per_token * mask).sum() / mask.sum().clamp(min=1)
