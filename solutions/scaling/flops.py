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
    ### BEGIN SOLUTION
    fields = _SIZE_FIELDS + (("head_dim",) if cfg.head_dim is not None else ())
    for field in fields:
        value = getattr(cfg, field)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{field} must be a positive integer, not {value!r}")
    if cfg.num_heads % cfg.num_kv_heads:
        raise ValueError(f"num_kv_heads={cfg.num_kv_heads} must divide num_heads={cfg.num_heads}")
    if cfg.head_dim is None and cfg.d_model % cfg.num_heads:
        raise ValueError(f"num_heads={cfg.num_heads} must divide d_model={cfg.d_model} (or set head_dim)")
    ### END SOLUTION


def parameter_count(cfg: TransformerConfig) -> int:
    """The weights of the model's matmuls: per layer the query, key, value and output
    projections and the MLP's matrices, plus one vocab_size x d_model matrix (the token
    embedding, tied to the LM head: counted once). Biases, norms and position embeddings are
    left out. Raises ValueError for a config check_config refuses.
    """
    ### BEGIN SOLUTION
    check_config(cfg)
    head_dim = _head_dim(cfg)
    attention = 2 * cfg.d_model * cfg.num_heads * head_dim + 2 * cfg.d_model * cfg.num_kv_heads * head_dim
    mlp = _mlp_matrices(cfg) * cfg.d_model * cfg.d_ff
    return cfg.num_layers * (attention + mlp) + cfg.vocab_size * cfg.d_model
    ### END SOLUTION


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
    ### BEGIN SOLUTION
    check_config(cfg)
    if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len < 1:
        raise ValueError(f"seq_len must be a positive integer, not {seq_len!r}")
    if recompute and not training:
        raise ValueError("recompute=True needs training=True: recomputation happens in backward")
    attention_width = cfg.num_heads * _head_dim(cfg)
    # Q, K, V, output and MLP matmuls: 2 FLOPs per weight of one layer (parameter_count less the embedding).
    projections = 2 * (parameter_count(cfg) - cfg.vocab_size * cfg.d_model) // cfg.num_layers
    # q k^T and weights @ v: 2 * attention_width FLOPs per key each. A causal query at position
    # i sees i + 1 keys: sum over i = s (s + 1) / 2, so (s + 1) / 2 per token on average.
    key_flops = 2 * 2 * attention_width
    attention = key_flops * (seq_len + 1) // 2 if causal else key_flops * seq_len
    layer = projections + attention
    head = 2 * cfg.d_model * cfg.vocab_size
    forward = cfg.num_layers * layer + head
    if not training:
        return forward
    return 3 * forward + (cfg.num_layers * layer if recompute else 0)
    ### END SOLUTION


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
    ### BEGIN SOLUTION
    _check_throughput(tokens_per_second, n_gpus, peak_flops)
    return tokens_per_second * transformer_flops(cfg, seq_len, training=True) / (n_gpus * peak_flops)
    ### END SOLUTION


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
    ### BEGIN SOLUTION
    _check_throughput(tokens_per_second, n_gpus, peak_flops)
    executed = transformer_flops(cfg, seq_len, training=True, recompute=recompute)
    return tokens_per_second * executed / (n_gpus * peak_flops)
    ### END SOLUTION


### BEGIN SOLUTION
def _head_dim(cfg: TransformerConfig) -> int:
    return cfg.head_dim if cfg.head_dim is not None else cfg.d_model // cfg.num_heads


def _mlp_matrices(cfg: TransformerConfig) -> int:
    return 3 if cfg.gated_mlp else 2  # gate, up and down projections, or up and down


def _check_throughput(tokens_per_second: float, n_gpus: int, peak_flops: float) -> None:
    for name, value in (("tokens_per_second", tokens_per_second), ("n_gpus", n_gpus), ("peak_flops", peak_flops)):
        if not value > 0:
            raise ValueError(f"{name} must be positive, not {value!r}")


### END SOLUTION
