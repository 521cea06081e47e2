"""dispatch hands out slots token by token (all of token 0's choices first) instead of first choices first.

Without dropping only the slot order can differ, and random routing can make it agree: not graded here."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: routing.py
# select: dispatch and not no-dropping
# fails: k2|first_choices_priority
# kind:
# message: .


def dispatch(x, expert_ids, num_experts, capacity):
    num_tokens, k = expert_ids.shape
    ordered = expert_ids.reshape(-1)
    one_hot = F.one_hot(ordered, num_experts)
    position = (one_hot.cumsum(dim=0) * one_hot).sum(dim=-1) - 1
    kept = position < capacity
    slots = torch.where(kept, position, -1).view(num_tokens, k)
    token = torch.arange(num_tokens, device=x.device).repeat_interleave(k)
    flat_row = torch.where(kept, ordered * capacity + position, num_experts * capacity)
    buffer = x.new_zeros(num_experts * capacity + 1, x.shape[-1])
    buffer = buffer.index_copy(0, flat_row, x[token])
    return buffer[:-1].view(num_experts, capacity, -1), slots
