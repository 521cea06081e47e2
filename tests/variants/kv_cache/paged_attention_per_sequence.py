"""Wasteful: paged_decode_attention gathers each sequence's blocks and attends in a Python loop,
one sequence at a time. Correct, but its operator count grows with the batch: a batch of 64
decodes launches 64 times the kernels of one batched read through padded block tables."""
# target: paged.py


def paged_decode_attention(q, cache, seq_ids, layer):
    num_heads, head_dim = q.shape[1], q.shape[2]
    rows = []
    for b, seq in enumerate(seq_ids):
        length = cache.lengths[seq][layer]
        table = torch.tensor(cache.block_table(seq), dtype=torch.long)
        keys = cache.key_blocks[layer, table].flatten(0, 1)[:length].transpose(0, 1).to(q)
        values = cache.value_blocks[layer, table].flatten(0, 1)[:length].transpose(0, 1).to(q)
        group = num_heads // keys.shape[0]
        keys, values = keys.repeat_interleave(group, dim=0), values.repeat_interleave(group, dim=0)
        scores = (q[b, :, None, :] @ keys.transpose(-2, -1)) / head_dim**0.5
        rows.append((torch.softmax(scores, dim=-1) @ values)[:, 0])
    return torch.stack(rows)
