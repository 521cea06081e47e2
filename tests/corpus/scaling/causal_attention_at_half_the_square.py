"""Causal attention counted as s / 2 keys per query: the diagonal (each query sees itself) is lost."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: flops.py
# select: causal
# fails: causal_counts_the_keys_each_query_sees
# kind:
# message: query i sees i \+ 1 keys


_counted = transformer_flops


def transformer_flops(cfg, seq_len, training=True, recompute=False, causal=False):
    if not causal:
        return _counted(cfg, seq_len, training, recompute)
    dense = _counted(cfg, seq_len, training, recompute)
    width = cfg.num_heads * (cfg.head_dim or cfg.d_model // cfg.num_heads)
    passes = (3 if training else 1) + (1 if recompute else 0)
    return dense - passes * cfg.num_layers * 2 * width * seq_len  # 4 * width * s / 2 instead of 4 * width * s
