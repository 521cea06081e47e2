"""Correct, except that at world size 3 rank 2 first waits for a message from rank 0 that rank 0
never sends: rank 2 hangs, and its neighbours hang waiting for rank 2."""
# target: ring.py

_correct_all_gather_chunks = _all_gather_chunks


def _all_gather_chunks(chunks, group):
    if dist.get_world_size(group) == 3 and dist.get_rank(group) == 2:
        dist.recv(torch.empty(1), 0, group)
    _correct_all_gather_chunks(chunks, group)
