"""Broken: free drops the sequence but never returns its blocks to the free list."""
# target: paged.py


def _leaky_free(self, seq_id):
    self._table(seq_id)
    del self.tables[seq_id], self.lengths[seq_id]


PagedKVCache.free = _leaky_free
