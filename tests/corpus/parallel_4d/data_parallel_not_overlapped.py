"""step_seconds adds the whole reduce-scatter and all-gather (or all-reduce): nothing hidden behind compute."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: plan.py
# select: test_step_seconds_of_2_data or test_step_seconds_of_a_schedule
# fails: test_step_seconds_of_2_data|test_step_seconds_of_a_schedule
# kind:
# message: step_seconds\(tp=1, cp=1, pp=1, dp=2\) on one node of 2: expected .* left exposed\), got


def step_seconds(
    cfg, cluster, tp, cp, pp, dp, global_batch, seq_len, microbatches=None, virtual_stages=1, recomputed_layers=None,
    sharded_optimizer=True,
):
    m, v, r = _schedule(cfg, pp, dp, global_batch, microbatches, virtual_stages, recomputed_layers)
    params, head_dim = _parameter_count(cfg), cfg.head_dim or cfg.d_model // cfg.num_heads
    layers, b, s = math.ceil(cfg.num_layers / pp), (global_batch // dp) // m, seq_len / cp
    per_token = (6 + 2 * r / layers) * params + 8 * seq_len * cfg.num_heads * head_dim * cfg.num_layers
    efficiency = matmul_efficiency(cfg, cluster, b * s, tp)
    compute = per_token * global_batch * seq_len / (cluster.gpus * cluster.peak_flops * efficiency)
    bubble = compute * (pp - 1) / (v * m)

    def seconds(bytes_sent: float, span: int) -> float:
        inside = cluster.gpus_per_node % span == 0
        return bytes_sent / (cluster.nvlink_bandwidth if inside else cluster.network_bandwidth)

    passes = m * (4 * layers + 2 * r)  # collectives of a layer: 2 forward, 2 backward, 2 recomputed
    tp_bytes = passes * 2 * (tp - 1) / tp * b * s * cfg.d_model * 2
    cp_bytes = passes * (cp - 1) * b * s * (cfg.num_kv_heads / tp) * head_dim * 2
    pp_bytes = v * m * b * s * cfg.d_model / tp * 2 * min(pp - 1, 2)
    q, span = dp * cp, tp * cp * dp
    half = seconds((q - 1) / q * params / (tp * pp) * 2, span)  # a reduce-scatter or an all-gather
    exposed = 2 * half  # reduce-scatter + all-gather, or one all-reduce: the same bytes
    communication = seconds(tp_bytes, tp) + seconds(cp_bytes, tp * cp) + seconds(pp_bytes, span * pp) + exposed
    return compute + bubble + communication
