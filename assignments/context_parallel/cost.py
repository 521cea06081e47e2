# Your working copy: replace every `raise NotImplementedError` with your implementation.
# (Generated from the course's reference by `python -m grader sync`.)
"""What context parallelism sends, and when the ring hides it (lecture 11-context-parallelism,
sections 5 and 7).

Sizes are those of the whole model input: a sequence of s positions split over p ranks (s/p
each), batch b, h_q query heads and h_kv key/value heads of dimension d, elements of
`element_bytes` bytes each (an int, or a torch.dtype such as torch.bfloat16).
"""

from __future__ import annotations

import math

import torch


def cp_comm_bytes(
    variant: str, s: int, b: int, h_q: int, h_kv: int, d: int, p: int, element_bytes: int | torch.dtype
) -> tuple[int, int]:
    """(forward_bytes, backward_bytes) that EACH rank sends in one attention layer's forward and
    its backward, for variant:

    "ring" (ring_attention, either layout): forward p-1 hops of this rank's K and V blocks
    (b, h_kv, s/p, d) each; backward p-1 hops of the K/V blocks again and p-1 hops of their
    gradients dK and dV.
    "ulysses": four all-to-alls each way (forward q, k, v in and the output back; backward the
    output's gradient in and the gradients of q, k, v back), each sending (p-1)/p of its tensor:
    (p-1) * (2 Q + 2 K) // p each way, with Q = b*h_q*(s/p)*d*element_bytes and K the same with
    h_kv. That is the count whether or not the heads split over p (ulysses_attention is what
    refuses heads that do not): the floor of the formula, never an error.
    "allgather_kv": forward all-gathers of K and V, backward reduce-scatters of dK and dV, each a
    ring collective that sends (p-1)/p of the gathered (b, h_kv, s, d) tensor.

    Exact integers; (0, 0) when p = 1. Raises ValueError for any other variant ("zigzag"
    included: cp_step's name for the zigzag ring, whose bytes are "ring"'s), or when s is not a
    multiple of p."""
    raise NotImplementedError("implement cp_comm_bytes (lectures/11-context-parallelism.md, section 7)")


def ring_overlap_condition(
    b: int,
    h_q: int,
    h_kv: int,
    d: int,
    element_bytes: int | torch.dtype,
    flops_per_second: float,
    alpha: float,
    beta: float,
) -> float:
    """The sequence length per rank, s_local, above which one ring step's attention compute
    takes longer than sending the next K/V block, so that the transfer hides behind it: the
    larger root of

        4 * b * h_q * s_local**2 * d / flops_per_second  =  alpha + beta * 2 * b * h_kv * s_local * d * element_bytes

    (the forward FLOPs of one block, QK^T and PV, lecture 09; the alpha-beta time of sending
    its K and V, lecture 01: alpha seconds per message, beta seconds per byte). A float, not
    rounded; with alpha = 0 it is h_kv * element_bytes * flops_per_second * beta / (2 * h_q),
    and with alpha = beta = 0 it is 0.0 (a free transfer hides behind any block), not an error.
    Raises ValueError unless flops_per_second > 0, alpha >= 0 and beta >= 0."""
    raise NotImplementedError("implement ring_overlap_condition (lectures/11-context-parallelism.md, section 7)")
