"""Wrong count: keys and values priced as if every query head had its own (num_kv_heads ignored)."""
# target: flops.py

_exact_flops = transformer_flops


def transformer_flops(cfg, seq_len, training=True, recompute=False, causal=False):
    import dataclasses

    return _exact_flops(dataclasses.replace(cfg, num_kv_heads=cfg.num_heads), seq_len, training, recompute, causal)
