# Your working copy: replace every `raise NotImplementedError` with your implementation.
# (Generated from the course's reference by `python -m grader sync`.)
"""Where the memory of data-parallel training goes (lecture 02, section 3).

Mixed-precision Adam keeps, per parameter: the fp16 parameter (2 bytes), its fp16 gradient
(2 bytes) and K = 12 bytes of optimizer state (fp32 master copy, momentum and variance), so
16 bytes in all. ZeRO (Rajbhandari et al., 2020) splits these over the p data-parallel ranks:

    stage 0 (plain DDP)  (2 + 2 + K) * Psi
    stage 1 (optimizer)  (2 + 2) * Psi + K * Psi / p
    stage 2 (+ grads)    2 * Psi + (2 + K) * Psi / p
    stage 3 (+ params)   (2 + 2 + K) * Psi / p
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

    Activations and temporary buffers are not counted. Example from the paper: 7.5e9
    parameters on 64 ranks give 120e9, 31.4e9, 16.6e9 and 1.875e9 bytes for stages 0 to 3.
    Raises ValueError for a stage outside 0..3 or a world size below 1.
    """
    raise NotImplementedError("implement zero_memory_per_rank (lectures/02-data-parallel-and-zero.md, section 3)")
