"""Broken: an append that runs out of blocks keeps the blocks it took before failing."""
# target: paged.py


def _greedy_append(self, seq_id, layer, k, v):
    table = self._table(seq_id)
    needed = -(-(self.lengths[seq_id][layer] + k.shape[0]) // self.block_size)
    while len(table) < needed and self.free_blocks:
        table.append(self._take_block())
    _append(self, seq_id, layer, k, v)


_append = PagedKVCache.append
PagedKVCache.append = _greedy_append
