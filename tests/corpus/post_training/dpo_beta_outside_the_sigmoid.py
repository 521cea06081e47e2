"""DPO with beta outside the sigmoid, -beta * log sigmoid(margin): the loss scaled instead of the
implicit reward, so beta no longer sets how far the policy may move from the reference. Refused by
the loss's value test; the refusals still pass."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: losses.py
# select: dpo_loss_is_the_mean or dpo_loss_refuses
# fails: test_dpo_loss_is_the_mean_of_minus_log_sigmoid_of_beta_times_the_margin
# kind:
# message: dpo_loss.*beta 0.1: loss: got


def dpo_loss(policy_chosen, policy_rejected, reference_chosen, reference_rejected, beta=0.1):
    if len({tuple(t.shape) for t in (policy_chosen, policy_rejected, reference_chosen, reference_rejected)}) != 1:
        raise ValueError("shapes differ")
    if policy_chosen.dim() != 1 or policy_chosen.numel() == 0 or not beta > 0:
        raise ValueError("bad batch or beta")
    chosen, rejected = policy_chosen - reference_chosen, policy_rejected - reference_rejected
    loss = -beta * F.logsigmoid(chosen - rejected).mean()
    return loss, beta * chosen.detach(), beta * rejected.detach()
