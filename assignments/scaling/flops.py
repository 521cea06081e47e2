# Your working copy: replace every `raise NotImplementedError` with your implementation.
# (Generated from the course's reference by `python -m grader sync`.)
"""Where a transformer's FLOPs go, and how much of the hardware a training run uses (lecture 09,
sections 1 and 3).

A matmul of an (m x k) by a (k x n) matrix costs 2 m k n FLOPs (one multiply and one add per
term). Per token and per layer of a decoder-only transformer with d = d_model, H query heads and
H_kv key/value heads of width d_h, and an MLP of width d_ff:

    query and output projections   2 * (2 d H d_h)
    keys and values (GQA)          2 * (2 d H_kv d_h)
    scores q k^T and weights @ v   2 * (2 H d_h * keys)    keys = s, or (s + 1) / 2 on average
                                                            when causal masking skips the future
    MLP                            2 * (2 d d_ff), or 3 * (2 d d_ff) when gated
and once per token the LM head, 2 d V. Backward costs two matmuls for each forward one (the
gradient of the input and of the weight), so training is 3x the forward; recomputing the layers'
activations in backward adds one more forward of the layers (Narayanan et al. 2021 count the LM
head 3x: it is not recomputed).
"""

from __future__ import annotations

from grader.models.transformer_config import TransformerConfig

_SIZE_FIELDS = ("num_layers", "d_model", "num_heads", "num_kv_heads", "d_ff", "vocab_size")


def check_config(cfg: TransformerConfig) -> None:
    """Raise ValueError, naming the field, unless `cfg` describes a transformer one can build.

    Every size (num_layers, d_model, num_heads, num_kv_heads, d_ff, vocab_size, and head_dim
    when it is set) must be a positive integer; num_kv_heads must divide num_heads; when
    head_dim is None, num_heads must divide d_model.
    """
    raise NotImplementedError("implement check_config (lectures/09-scaling-laws-and-cost.md, section 1)")


def parameter_count(cfg: TransformerConfig) -> int:
    """The weights of the model's matmuls: per layer the query, key, value and output
    projections and the MLP's matrices, plus one vocab_size x d_model matrix (the token
    embedding, tied to the LM head: counted once). Biases, norms and position embeddings are
    left out. Raises ValueError for a config check_config refuses.
    """
    raise NotImplementedError("implement parameter_count (lectures/09-scaling-laws-and-cost.md, section 1)")


def transformer_flops(
    cfg: TransformerConfig, seq_len: int, training: bool = True, recompute: bool = False, causal: bool = False
) -> int:
    """FLOPs per token of a sequence of `seq_len` tokens, counted matmul by matmul (2 per
    multiply-add): the query, key/value (num_kv_heads of them) and output projections, the
    attention scores and the weighted sum of values, the MLP (three matrices when gated_mlp,
    else two) in every layer, and the LM head once.

    causal=False counts every query against all seq_len keys, as a model that masks a full
    score matrix computes it; causal=True counts only the keys a causal kernel visits (position
    i sees i + 1 keys), averaged over the sequence. training=False is the forward pass;
    training=True is forward + backward, 3x the forward; recompute=True adds one more forward of
    the layers (not of the LM head), as full activation recomputation does.
    Raises ValueError for a config check_config refuses, seq_len < 1, or recompute without
    training.
    """
    raise NotImplementedError("implement transformer_flops (lectures/09-scaling-laws-and-cost.md, section 1)")


def approximate_training_flops(num_params: float, num_layers: int, seq_len: int, attention_width: int) -> float:
    """Given: the usual estimate of training FLOPs per token, 6 N + 12 L s d_attn (Kaplan et al.
    2020; Chowdhery et al. 2022, appendix B), d_attn = num_heads * head_dim. With N =
    parameter_count(cfg) it equals transformer_flops(cfg, s) (dense attention, no recomputation);
    with the model's total parameter count it also counts embeddings, which cost no matmul."""
    return 6 * num_params + 12 * num_layers * seq_len * attention_width


def model_flops_utilization(
    cfg: TransformerConfig, seq_len: int, tokens_per_second: float, n_gpus: int, peak_flops: float
) -> float:
    """The fraction of the GPUs' peak that the model's own FLOPs use: tokens_per_second *
    transformer_flops(cfg, seq_len, training=True) / (n_gpus * peak_flops), with dense attention
    and without recomputation, as PaLM counts it (Chowdhery et al. 2022, appendix B): work that
    is redone does not count. Raises ValueError unless tokens_per_second, n_gpus and peak_flops
    are positive (and for what transformer_flops refuses).
    """
    raise NotImplementedError("implement model_flops_utilization (lectures/09-scaling-laws-and-cost.md, section 3)")


def hardware_flops_utilization(
    cfg: TransformerConfig,
    seq_len: int,
    tokens_per_second: float,
    n_gpus: int,
    peak_flops: float,
    recompute: bool = True,
) -> float:
    """The fraction of the GPUs' peak that the hardware computes: as model_flops_utilization, but
    with the FLOPs the run executes, transformer_flops(cfg, seq_len, training=True,
    recompute=recompute). With recompute=False it equals model_flops_utilization. Raises
    ValueError as model_flops_utilization does.
    """
    raise NotImplementedError("implement hardware_flops_utilization (lectures/09-scaling-laws-and-cost.md, section 3)")


# (Write any helper functions you need here.)
