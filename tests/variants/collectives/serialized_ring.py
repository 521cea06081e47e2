"""The ring with blocking calls in a safe order: rank 0 sends first, the others receive first.
Correct and within the bytes bound, but each step now runs as p transfers one after another
instead of p at once."""
# target: ring.py


def _send_right_receive_left(send, receive, right, left, group):
    if dist.get_rank(group) == 0:
        if send.numel():
            dist.send(send, right, group)
        if receive.numel():
            dist.recv(receive, left, group)
    else:
        if receive.numel():
            dist.recv(receive, left, group)
        if send.numel():
            dist.send(send, right, group)
