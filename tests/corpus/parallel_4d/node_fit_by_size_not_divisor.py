"""step_seconds puts a group inside a node when its span is at most gpus_per_node (not when it divides it)."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: plan.py
# select: test_step_seconds_counts or test_plan_lists_every_grid
# fails: test_step_seconds_counts|test_plan_lists_every_grid_that_fits_fastest_first_as_a_brute_force.*\[12-gpus
# kind:
# message: plan on 12 GPUs \(6 per node.*: plan \(.*\): expected memory .* bytes and .* s \(plan_memory


def step_seconds(cfg, cluster, tp, cp, pp, dp, global_batch, seq_len):
    params, head_dim = _parameter_count(cfg), cfg.head_dim or cfg.d_model // cfg.num_heads
    m, layers, s = global_batch // dp, math.ceil(cfg.num_layers / pp), seq_len / cp
    compute = 8 * params * global_batch * seq_len / (cluster.gpus * cluster.peak_flops * cluster.mfu)
    bubble = compute * (pp - 1) / m

    def seconds(bytes_sent, span):
        inside = span <= cluster.gpus_per_node  # "fits in a node"
        return bytes_sent / (cluster.nvlink_bandwidth if inside else cluster.network_bandwidth)

    q = dp * cp
    tp_bytes = m * layers * 6 * 2 * (tp - 1) / tp * s * cfg.d_model * 2
    cp_bytes = m * layers * 6 * (cp - 1) * s * (cfg.num_kv_heads / tp) * head_dim * 2
    pp_bytes = m * s * cfg.d_model / tp * 2 * min(pp - 1, 2)
    dp_bytes = 2 * (q - 1) / q * params / (tp * pp) * 2
    communication = (
        seconds(tp_bytes, tp)
        + seconds(cp_bytes, tp * cp)
        + seconds(dp_bytes, tp * cp * dp)
        + seconds(pp_bytes, tp * cp * dp * pp)
    )
    return compute + bubble + communication
