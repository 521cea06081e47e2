"""The expert-parallel backward skips its all-to-all on a rank that received no token (nothing to send back, it reasons); the other rank waits in that all-to-all for it forever."""

# ruff: noqa: E501, F821 - a fragment appended to a solution file, whose names are in scope
# target: expert_parallel.py
# select: expert_parallel
# fails: test_expert_parallel_with_a_rank_that_receives_no_token
# kind: deadlock
# message: in step \d of \d \(expert_parallel_forward_backward\): expert_parallel_forward_backward deadlocked: rank 0 waited in a communication call and no rank moved a byte for [\d.]+ s \(rank 1 had already returned\); where each rank was:\n  rank 0: expert_parallel\.py:\d+ in backward\(\): dist\.all_to_all_single\([^\n]*\n      waits in all_to_all_single in a group of 2(.|\n)*the case: world size 2, expert_parallel_forward_backward\([^\n]*\) in test_expert_parallel_with_a_rank_that_receives_no_token

_correct_backward = _AllToAll.backward


def _backward_unless_nothing_was_received(ctx, grad_received):
    if grad_received.numel() == 0:
        return grad_received.new_zeros(sum(ctx.sizes[0]), *grad_received.shape[1:]), None, None, None
    return _correct_backward(ctx, grad_received)


_AllToAll.backward = staticmethod(_backward_unless_nothing_was_received)
