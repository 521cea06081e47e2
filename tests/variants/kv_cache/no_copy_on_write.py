"""Broken: append writes straight into shared blocks (no copy-on-write)."""
# target: paged.py


def _no_copy(self, block):
    return block


PagedKVCache._copy_block = _no_copy
