"""Correct except at world size 3, where rank 2 waits for a message rank 0 never sends."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: ring.py
# select: sums_in_place
# fails: sums_in_place\[3\]
# kind: timeout
# message: rank \d: ring\.py:\d+ in \w+\(\)

_correct_all_gather_chunks = _all_gather_chunks


def _all_gather_chunks(chunks, group):
    if dist.get_world_size(group) == 3 and dist.get_rank(group) == 2:
        dist.recv(torch.empty(1), 0, group)
    _correct_all_gather_chunks(chunks, group)
