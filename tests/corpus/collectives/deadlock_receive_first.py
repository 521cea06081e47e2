"""Every rank receives before it sends, with blocking calls: the whole ring waits forever, at every world size."""

# ruff: noqa: E501, F821 - a fragment appended to a solution file, whose names are in scope
# target: ring.py
# select: sums_in_place or allreduce_time_ring_formula
# fails: sums_in_place
# kind: deadlock
# message: ring_allreduce deadlocked: every rank waited in a communication call and no rank moved a byte for [\d.]+ s; where each rank was:\n  rank 0: ring\.py:\d+ in _send_right_receive_left\(\): dist\.recv\(receive, left, group\)[^\n]*\n      waits in recv from rank \d \(tag 0\)(.|\n)*the cycle: rank 0 waits for rank \d, (.|\n)*\nthe case: world size \d, ring_allreduce\(float\d+\[\d+(, \d+)*\]\) in test_\w+


def _send_right_receive_left(send, receive, right, left, group):
    if receive.numel():
        dist.recv(receive, left, group)
    if send.numel():
        dist.send(send, right, group)
