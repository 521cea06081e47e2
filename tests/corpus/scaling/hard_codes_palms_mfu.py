"""model_flops_utilization returns PaLM's published 46.2 % whatever the run."""
# target: flops.py
# select: mfu
# fails: hfu_counts_recomputation_and_mfu_does_not
# kind:
# message: MFU: got 0\.462, expected


def model_flops_utilization(cfg, seq_len, tokens_per_second, n_gpus, peak_flops):
    return 0.462
