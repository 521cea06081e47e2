"""expert_capacity refuses capacity_factor == 0 only: a negative factor gives a negative capacity."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: routing.py
# select: expert_capacity
# fails: rejects_a_negative_factor
# kind:
# message: capacity_factor=-1.0\): expected ValueError

_checked = expert_capacity


def expert_capacity(num_tokens, num_experts, k, capacity_factor):
    if capacity_factor is not None and capacity_factor < 0:
        return min(num_tokens, math.ceil(capacity_factor * num_tokens * k / num_experts))  # the bug
    return _checked(num_tokens, num_experts, k, capacity_factor)
