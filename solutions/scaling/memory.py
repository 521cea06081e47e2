"""The memory budget of one GPU in a 3D-parallel training run, and how long the run takes
(lecture 09, sections 4 and 5).

Model states (Rajbhandari et al. 2020, as in module zero): per parameter, b_p bytes of weights,
b_g of gradients and K of optimizer state (mixed-precision Adam: 2 + 2 + 12; fp32 Adam: 4 + 4 +
8). Tensor (tp) and pipeline (pp) parallelism split the weights over tp * pp GPUs; ZeRO stage
1, 2, 3 then shards optimizer state, + gradients, + weights over the dp data-parallel ranks.

Activations (Korthikanti et al. 2022, table 2): bytes one layer keeps for backward, with s the
sequence length, b the micro-batch, h = d_model, a the heads, t = tp, 2-byte activations:

    no parallelism           s b h (34 + 5 a s / h)
    tensor parallel          s b h (10 + 24 / t + 5 a s / (h t))
    + sequence parallel      s b h / t (34 + 5 a s / h)
selective recomputation drops the 5 a s / h term (the attention scores); full recomputation
keeps only each layer's input, 2 s b h bytes (/ t with sequence parallelism). With pipeline
parallelism and the 1F1B schedule the first stage holds pp micro-batches of L / pp layers: L
layers' worth in all, whatever pp is.
"""

from __future__ import annotations

from flops import parameter_count

from grader.models.transformer_config import TransformerConfig

RECOMPUTE = ("none", "selective", "full")
# bytes per parameter: (weights, gradients, optimizer state)
MODEL_STATE_BYTES = {"bf16": (2, 2, 12), "fp16": (2, 2, 12), "fp32": (4, 4, 8)}
SECONDS_PER_DAY = 86_400


def activation_bytes_per_layer(
    seq_len: int,
    micro_batch: int,
    d_model: int,
    num_heads: int,
    tp: int,
    sequence_parallel: bool,
    selective_recompute: bool,
) -> float:
    """Bytes of activations one transformer layer keeps for backward, 2-byte activations,
    Korthikanti et al. 2022, table 2 (the rows above). With tp = 1 sequence_parallel changes
    nothing. Raises ValueError unless every size is a positive integer.
    """
    ### BEGIN SOLUTION
    for name, value in (
        ("seq_len", seq_len),
        ("micro_batch", micro_batch),
        ("d_model", d_model),
        ("num_heads", num_heads),
        ("tp", tp),
    ):
        _check_positive_int(name, value)
    s, b, h, a, t = seq_len, micro_batch, d_model, num_heads, tp
    # 5 a s^2 b: softmax input, output and dropout mask; integers until the one division by t.
    scores = 0 if selective_recompute else 5 * a * s * s * b
    if sequence_parallel:
        return (34 * s * b * h + scores) / t
    # Without sequence parallelism the layer norms' and dropouts' 10 s b h bytes are replicated.
    return 10 * s * b * h + (24 * s * b * h + scores) / t
    ### END SOLUTION


def training_memory(
    cfg: TransformerConfig,
    micro_batch: int,
    seq_len: int,
    dp: int = 1,
    tp: int = 1,
    pp: int = 1,
    zero_stage: int = 0,
    recompute: str = "none",
    dtype: str = "bf16",
    sequence_parallel: bool = False,
) -> dict[str, float]:
    """Bytes on one GPU, as {"parameters", "gradients", "optimizer", "activations", "total"}.

    Psi = parameter_count(cfg) / (tp * pp) parameters per GPU, with (weights, gradients,
    optimizer) bytes per parameter MODEL_STATE_BYTES[dtype]; zero_stage 1 divides the optimizer
    state by dp, 2 also the gradients, 3 also the weights (module zero's formula). Activations:
    num_layers * activation_bytes_per_layer(seq_len, micro_batch, d_model, num_heads, tp,
    sequence_parallel, recompute == "selective"), or num_layers * 2 * seq_len * micro_batch *
    d_model (/ tp with sequence_parallel) for recompute == "full"; dtype "fp32" doubles them.
    Raises ValueError for a config check_config refuses, sizes below 1, pp not dividing
    num_layers, tp not dividing num_heads, a zero_stage outside 0..3, or an unknown recompute
    or dtype.
    """
    ### BEGIN SOLUTION
    for name, value in (("micro_batch", micro_batch), ("seq_len", seq_len), ("dp", dp), ("tp", tp), ("pp", pp)):
        _check_positive_int(name, value)
    params = parameter_count(cfg) / (tp * pp)  # also checks cfg
    if cfg.num_layers % pp:
        raise ValueError(f"pp={pp} must divide num_layers={cfg.num_layers}")
    if cfg.num_heads % tp:
        raise ValueError(f"tp={tp} must divide num_heads={cfg.num_heads}")
    if zero_stage not in (0, 1, 2, 3):
        raise ValueError(f"zero_stage must be 0, 1, 2 or 3, not {zero_stage!r}")
    if recompute not in RECOMPUTE:
        raise ValueError(f"recompute must be one of {RECOMPUTE}, not {recompute!r}")
    if dtype not in MODEL_STATE_BYTES:
        raise ValueError(f"dtype must be one of {tuple(MODEL_STATE_BYTES)}, not {dtype!r}")
    weight_bytes, grad_bytes, optimizer_bytes = MODEL_STATE_BYTES[dtype]
    # ZeRO: stage >= 1 shards the optimizer state, >= 2 the gradients, 3 the weights.
    memory = {
        "parameters": weight_bytes * params / (dp if zero_stage >= 3 else 1),
        "gradients": grad_bytes * params / (dp if zero_stage >= 2 else 1),
        "optimizer": optimizer_bytes * params / (dp if zero_stage >= 1 else 1),
    }
    if recompute == "full":
        per_layer = 2 * seq_len * micro_batch * cfg.d_model / (tp if sequence_parallel else 1)
    else:
        per_layer = activation_bytes_per_layer(
            seq_len, micro_batch, cfg.d_model, cfg.num_heads, tp, sequence_parallel, recompute == "selective"
        )
    # 1F1B: the first stage holds pp micro-batches of num_layers / pp layers each.
    activation_scale = 2 if dtype == "fp32" else 1
    memory["activations"] = activation_scale * cfg.num_layers * per_layer
    memory["total"] = sum(memory.values())
    return memory
    ### END SOLUTION


def training_time(total_flops: float, n_gpus: int, peak_flops: float, mfu: float) -> float:
    """Days to compute `total_flops` on n_gpus GPUs of `peak_flops` FLOP/s each, at model FLOPs
    utilization `mfu`: total_flops / (n_gpus * peak_flops * mfu) / 86400. Raises ValueError
    unless total_flops, n_gpus and peak_flops are positive and 0 < mfu <= 1.
    """
    ### BEGIN SOLUTION
    _check_run(total_flops, n_gpus, peak_flops, mfu)
    return total_flops / (n_gpus * peak_flops * mfu) / SECONDS_PER_DAY
    ### END SOLUTION


def gpu_hours(total_flops: float, peak_flops: float, mfu: float) -> float:
    """GPU-hours to compute `total_flops` on GPUs of `peak_flops` FLOP/s at utilization `mfu`:
    total_flops / (peak_flops * mfu) / 3600, however many GPUs share the work. Raises ValueError
    unless total_flops and peak_flops are positive and 0 < mfu <= 1.
    """
    ### BEGIN SOLUTION
    _check_run(total_flops, 1, peak_flops, mfu)
    return total_flops / (peak_flops * mfu) / 3600
    ### END SOLUTION


### BEGIN SOLUTION
def _check_positive_int(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, not {value!r}")


def _check_run(total_flops: float, n_gpus: int, peak_flops: float, mfu: float) -> None:
    for name, value in (("total_flops", total_flops), ("n_gpus", n_gpus), ("peak_flops", peak_flops)):
        if not value > 0:
            raise ValueError(f"{name} must be positive, not {value!r}")
    if not 0 < mfu <= 1:
        raise ValueError(f"mfu must be in (0, 1], not {mfu!r}")


### END SOLUTION
