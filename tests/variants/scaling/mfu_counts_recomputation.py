"""The double-counting mistake: MFU computed from the FLOPs the hardware runs, recomputation included."""
# target: flops.py


def model_flops_utilization(cfg, seq_len, tokens_per_second, n_gpus, peak_flops):
    executed = transformer_flops(cfg, seq_len, training=True, recompute=True)
    return tokens_per_second * executed / (n_gpus * peak_flops)
