"""Activation memory of one transformer layer under tensor and sequence parallelism (lecture 07,
section 5), after Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
Transformer Models", table 2.

With 2-byte (16-bit) activations and 1-byte dropout masks, one layer of sequence length s,
micro-batch b, hidden size h and a attention heads keeps for backward

    attention   11 sbh + 5 a s^2 b    (QKV input 2, Q and K 4, V 2, scores softmax 2as^2b,
                                       its dropout mask as^2b and output 2as^2b, the output
                                       projection's input 2, its dropout mask 1)
    MLP         19 sbh                (fc1 input 2, GeLU input 8, fc2 input 8, dropout mask 1)
    LayerNorms   4 sbh                (the inputs of both, 2 each)

that is sbh (34 + 5 a s / h) bytes. Tensor parallelism over t ranks divides everything inside
the attention and MLP regions by t, but not the 10 sbh outside them (the LayerNorm inputs, the
inputs of the QKV and fc1 matmuls, the two dropout masks); sequence parallelism divides those
too. Selective recomputation drops the 5as^2b of the attention core (recomputed in backward).
"""

from __future__ import annotations


def tp_activation_bytes(
    s: int, b: int, h: int, a: int, t: int, sequence_parallel: bool = False, selective_recompute: bool = False
) -> float:
    """Bytes of activations one transformer layer keeps for backward on each of t
    tensor-parallel ranks, table 2 of Korthikanti et al. 2022 (2-byte activations):

        no sequence parallelism:    s*b*h * (10 + 24/t + 5*a*s/(h*t))
        sequence parallelism:       s*b*h/t * (34 + 5*a*s/h)

    and with selective_recompute=True the attention term 5*a*s/(h*t) (5*a*s/h) is dropped:
    s*b*h * (10 + 24/t), or s*b*h * 34/t. t = 1 is no parallelism: s*b*h * (34 + 5*a*s/h).

    s sequence length, b micro-batch size, h hidden size, a attention heads, t tensor-parallel
    size. Returns a float (exact where the figure is an integer below 2**53). Raises ValueError
    when s, b, h, a or t is not a positive integer.
    """
    ### BEGIN SOLUTION
    for name, value in (("s", s), ("b", b), ("h", h), ("a", a), ("t", t)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    attention_core = 0 if selective_recompute else 5 * a * s * s * b  # 5as^2b: softmax, mask, dropout
    if sequence_parallel:
        return (34 * s * b * h + attention_core) / t
    return 10 * s * b * h + (24 * s * b * h + attention_core) / t
    ### END SOLUTION
