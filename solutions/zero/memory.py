"""Where the memory of data-parallel training goes (lecture 02, section 3).

Per parameter, training keeps the parameter (P bytes), its gradient (G bytes) and K bytes of
optimizer state. Mixed-precision Adam: the fp16 parameter (P = 2), its fp16 gradient (G = 2)
and K = 12 bytes of fp32 master copy, momentum and variance, so 16 bytes in all. ZeRO
(Rajbhandari et al., 2020) splits these over the p data-parallel ranks, for Psi parameters:

    stage 0 (plain DDP)  (P + G + K) * Psi
    stage 1 (optimizer)  (P + G) * Psi + K * Psi / p
    stage 2 (+ grads)    P * Psi + (G + K) * Psi / p
    stage 3 (+ params)   (P + G + K) * Psi / p

(mixed-precision Adam: 16 Psi, 4 Psi + 12 Psi / p, 2 Psi + 14 Psi / p, 16 Psi / p).
"""

from __future__ import annotations


def zero_memory_per_rank(
    num_params: int,
    world_size: int,
    stage: int,
    bytes_per_param: int = 2,
    bytes_per_grad: int = 2,
    optimizer_bytes_per_param: int = 12,
) -> float:
    """Model-state bytes held by one rank under ZeRO `stage` (0 = plain data parallelism).

    The module docstring's line for `stage`, with Psi = num_params, p = world_size,
    P = bytes_per_param, G = bytes_per_grad and K = optimizer_bytes_per_param: each count in
    its own term (they may all differ, e.g. fp32 parameters with bf16 gradients), any p >= 1
    (3 or 6 as well as 64), and Psi / p exact (a float, never rounded), also when p does not
    divide num_params. Activations and temporary buffers are not counted. Example from the
    paper: 7.5e9 parameters on 64 ranks give 120e9, 31.4e9, 16.6e9 and 1.875e9 bytes for
    stages 0 to 3.
    Raises ValueError for a stage outside 0..3 or a world size below 1.
    """
    ### BEGIN SOLUTION
    if stage not in (0, 1, 2, 3):
        raise ValueError(f"ZeRO stage must be 0, 1, 2 or 3, not {stage}")
    if world_size < 1:
        raise ValueError(f"world_size must be at least 1, not {world_size}")
    parts = [bytes_per_param, bytes_per_grad, optimizer_bytes_per_param]  # replicated below `stage`
    # Stage s shards the last s parts of the list read right to left: optimizer, grads, params.
    sharded = sum(parts[3 - stage :]) if stage else 0
    replicated = sum(parts) - sharded
    return float(num_params * (replicated + sharded / world_size))
    ### END SOLUTION
