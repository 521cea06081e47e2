"""ring_allreduce dereferences a null pointer: the worker dies of SIGSEGV."""

# target: ring.py
# select: sums_in_place[2] or allreduce_time_ring_formula
# fails: sums_in_place
# kind: crash
# message: killed by SIGSEGV[^\n]*\n\s+crashed at ring\.py:\d+ in ring_allreduce\(\): ctypes\.string_at\(0\)

import ctypes


def ring_allreduce(tensor, group=None):
    ctypes.string_at(0)
