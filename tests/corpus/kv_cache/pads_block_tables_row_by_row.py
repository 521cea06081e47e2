"""Correct: paged_decode_attention pads the block tables one row at a time, then reads the pool once.

The docstring asks to pad the tables to the longest, and says nothing of how: the index building
grows with the batch, the reads of the pool and the attention do not. Full marks."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: paged.py
# select: paged_decode_attention
# fails: -
# kind:
# message: .


def paged_decode_attention(q, cache, seq_ids, layer):
    num_heads, head_dim = q.shape[1], q.shape[2]
    tables = [cache.block_table(s) for s in seq_ids]
    width = max(len(t) for t in tables)
    padded = torch.zeros(len(seq_ids), width, dtype=torch.long)
    lengths = torch.zeros(len(seq_ids), dtype=torch.long)
    for row, (seq, table) in enumerate(zip(seq_ids, tables)):
        padded[row, : len(table)] = torch.tensor(table, dtype=torch.long)
        lengths[row] = cache.lengths[seq][layer]
    keys = cache.key_blocks[layer, padded].flatten(1, 2).transpose(1, 2).to(q)
    values = cache.value_blocks[layer, padded].flatten(1, 2).transpose(1, 2).to(q)
    group = num_heads // keys.shape[1]
    keys, values = keys.repeat_interleave(group, dim=1), values.repeat_interleave(group, dim=1)
    scores = (q[:, :, None, :] @ keys.transpose(-2, -1)) / head_dim**0.5
    valid = torch.arange(width * cache.block_size)[None, :] < lengths[:, None]
    scores = scores.masked_fill(~valid[:, None, None, :], float("-inf"))
    return (torch.softmax(scores, dim=-1) @ values)[:, :, 0]
