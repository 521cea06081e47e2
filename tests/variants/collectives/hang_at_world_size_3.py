"""Correct, except that at world size 3 rank 2 returns before the last all-gather step: its
neighbours wait forever for a message that never comes."""
# target: ring.py

_correct_all_gather_chunks = _all_gather_chunks


def _all_gather_chunks(chunks, group):
    rank, p, left, right = ring_neighbours(group)
    if p != 3 or rank != 2:
        return _correct_all_gather_chunks(chunks, group)
    for step in range(p - 2):
        _send_right_receive_left(chunks[(rank - step) % p], chunks[(rank - step - 1) % p], right, left, group)
