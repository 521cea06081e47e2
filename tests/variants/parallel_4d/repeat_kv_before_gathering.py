"""Attention repeats the K/V heads for grouped-query attention BEFORE all-gathering them over the
cp group: the result is right, but the cp group carries num_heads / num_kv_heads times the bytes."""
# target: model.py


def _attention_repeating_first(self, block, x, positions):
    attention, config = block.attention, self.config
    b, s_local, _ = x.shape
    x = copy_to_tp_region(x, self.tp_group)
    q = attention.query(x).view(b, s_local, self.heads, config.head_dim).transpose(1, 2)
    k, v = attention.key_value(x).view(b, s_local, 2, self.kv_heads, config.head_dim).unbind(2)
    repeat = self.heads // self.kv_heads
    k = all_gather_sequence(k.transpose(1, 2).repeat_interleave(repeat, dim=1), self.cp_group)
    v = all_gather_sequence(v.transpose(1, 2).repeat_interleave(repeat, dim=1), self.cp_group)
    scores = q @ k.transpose(-2, -1) / math.sqrt(config.head_dim)
    future = torch.arange(k.shape[2])[None, :] > positions[:, None]
    y = F.softmax(scores.masked_fill(future, float("-inf")), dim=-1) @ v
    y = attention.out(y.transpose(1, 2).reshape(b, s_local, -1))
    return reduce_from_tp_region(y, self.tp_group)


_Stage._attention = _attention_repeating_first
