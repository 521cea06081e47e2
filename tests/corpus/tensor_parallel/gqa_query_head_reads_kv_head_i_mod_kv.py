"""ParallelSelfAttention whose query head i reads key/value head i % kv (k and v tiled with repeat) instead of i // (heads / kv_heads): the same with one key/value head per rank, wrong with two."""

# ruff: noqa: E501, F821 - a fragment appended to a solution file, whose names are in scope
# target: layers.py
# select: parallel_block_matches_one_process
# fails: parallel_block_matches_one_process\[world=2-tp-gqa8x4\]|parallel_block_matches_one_process\[world=4-sp-gqa16x8\]
# kind:
# message: ParallelBlock, world=2-tp-gqa8x4 \(s=16, b=2, h=32, heads=8, kv_heads=4; 2 key\/value heads per rank: query head i reads key\/value head i // \(heads / kv_heads\), 2 consecutive query heads per group\): rank 0.s output \(whole\)


def _attention_reading_kv_head_i_mod_kv(self, x):
    qkv = self.qkv(x)
    s, b, _ = qkv.shape
    d, heads, kv = self.head_dim, self.local_heads, self.local_kv_heads
    q, k, v = qkv.split([heads * d, kv * d, kv * d], dim=-1)
    q, k, v = (t.unflatten(-1, (-1, d)).permute(1, 2, 0, 3) for t in (q, k, v))
    k, v = k.repeat(1, heads // kv, 1, 1), v.repeat(1, heads // kv, 1, 1)  # head i -> kv head i % kv
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return self.proj(y.permute(2, 0, 1, 3).reshape(s, b, heads * d))


ParallelSelfAttention.forward = _attention_reading_kv_head_i_mod_kv
