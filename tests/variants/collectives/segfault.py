"""ring_allreduce dereferences a null pointer: the worker dies of SIGSEGV."""

# target: ring.py
import ctypes


def ring_allreduce(tensor, group=None):
    ctypes.string_at(0)
