# Your working copy: replace every `raise NotImplementedError` with your implementation.
# (Generated from the course's reference by `python -m grader sync`.)
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
    raise NotImplementedError("implement activation_bytes_per_layer (lectures/09-scaling-laws-and-cost.md, section 4)")


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
    raise NotImplementedError("implement training_memory (lectures/09-scaling-laws-and-cost.md, section 4)")


def training_time(total_flops: float, n_gpus: int, peak_flops: float, mfu: float) -> float:
    """Days to compute `total_flops` on n_gpus GPUs of `peak_flops` FLOP/s each, at model FLOPs
    utilization `mfu`: total_flops / (n_gpus * peak_flops * mfu) / 86400. Raises ValueError
    unless total_flops, n_gpus and peak_flops are positive and 0 < mfu <= 1.
    """
    raise NotImplementedError("implement training_time (lectures/09-scaling-laws-and-cost.md, section 5)")


def gpu_hours(total_flops: float, peak_flops: float, mfu: float) -> float:
    """GPU-hours to compute `total_flops` on GPUs of `peak_flops` FLOP/s at utilization `mfu`:
    total_flops / (peak_flops * mfu) / 3600, however many GPUs share the work. Raises ValueError
    unless total_flops and peak_flops are positive and 0 < mfu <= 1.
    """
    raise NotImplementedError("implement gpu_hours (lectures/09-scaling-laws-and-cost.md, section 5)")


# (Write any helper functions you need here.)
