"""Every rank receives before it sends, with blocking calls: the whole ring waits forever, at every world size."""

# ruff: noqa: E501, F821 - a fragment appended to a solution file, whose names are in scope
# target: ring.py
# select: sums_in_place or allreduce_time_ring_formula
# fails: sums_in_place
# kind: timeout
# message: did not finish within [\d.]+ s; where each rank was:\n  rank 0: ring\.py:\d+ in _send_right_receive_left\(\): dist\.recv\(receive, left, group\)


def _send_right_receive_left(send, receive, right, left, group):
    if receive.numel():
        dist.recv(receive, left, group)
    if send.numel():
        dist.send(send, right, group)
