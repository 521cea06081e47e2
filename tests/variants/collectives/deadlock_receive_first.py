"""Every rank receives before it sends, with blocking calls: the whole ring waits forever."""
# target: ring.py


def _send_right_receive_left(send, receive, right, left, group):
    if receive.numel():
        dist.recv(receive, left, group)
    if send.numel():
        dist.send(send, right, group)
