"""Correct except at world size 3, where rank 2 waits for a message rank 0 never sends."""

# ruff: noqa: E501, F821 - a fragment appended to a solution file, whose names are in scope
# target: ring.py
# select: sums_in_place
# fails: sums_in_place\[3\]
# kind: deadlock
# message: deadlocked(.|\n)*rank 2: ring\.py:\d+ in _all_gather_chunks\(\): dist\.recv\(torch\.empty\(1\), 0, group\)[^\n]*\n      waits in recv from rank 0(.|\n)*the cycle: rank 0 waits for rank 2, rank 2 waits for rank 0\n(.|\n)*the case: world size 3, ring_allreduce\(float32\[10, 7\]\) in test_ring_allreduce_sums_in_place\[3\]

_correct_all_gather_chunks = _all_gather_chunks


def _all_gather_chunks(chunks, group):
    if dist.get_world_size(group) == 3 and dist.get_rank(group) == 2:
        dist.recv(torch.empty(1), 0, group)
    _correct_all_gather_chunks(chunks, group)
