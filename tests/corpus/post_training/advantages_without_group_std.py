"""AIInfra's GRPO notebook: advantages are each reward minus its group's mean, never divided by the
group's standard deviation (and a group of equal rewards left with its mean's rounding noise).
Refused by the group-normalisation test, with a message that names group normalisation."""

# target: losses.py
# select: normalise_each_group or equal_rewards or without_scaling
# fails: test_group_advantages_normalise_each_group_by_its_mean|test_a_group_of_equal_rewards_has_exactly_zero
# kind:
# message: group normalisation.*divide by the group's standard deviation


def group_advantages(rewards, group_size, scale=True, eps=1e-4):
    groups = rewards.view(-1, group_size)
    return (groups - groups.mean(dim=1, keepdim=True)).reshape(-1)
