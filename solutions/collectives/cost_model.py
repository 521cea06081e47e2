"""The alpha-beta cost model of allreduce (lecture 01-collectives, section 4).

A message of n bytes between two ranks costs alpha + n * beta seconds: alpha is the latency
(start-up) of one message, beta the time per byte (1 / link bandwidth). The time of the
reduction arithmetic itself is left out, as in most of the literature on large messages.

The formulas are those of Thakur, Rabenseifner and Gropp, "Optimization of Collective
Communication Operations in MPICH" (2005). When p is not a power of two, recursive doubling and
Rabenseifner's algorithm first fold the r = p - p' extra ranks into partners (p' is the largest
power of two <= p): one full-vector message before and one after, 2 * (alpha + n * beta) in all.
"""

import math

ALGORITHMS = ("ring", "recursive_doubling", "rabenseifner")


def allreduce_time(algorithm: str, world_size: int, nbytes: float, alpha: float, beta: float) -> float:
    """Predicted seconds for one allreduce of `nbytes` bytes over `world_size` ranks.

    algorithm:
      "ring"                2(p-1) * alpha + 2(p-1)/p * n * beta
                            (reduce-scatter, then all-gather, each p-1 steps of n/p bytes)
      "recursive_doubling"  log2(p) * (alpha + n * beta)
                            (each of log2(p) steps exchanges the whole vector)
      "rabenseifner"        2 log2(p) * alpha + 2(p-1)/p * n * beta
                            (reduce-scatter by recursive halving, all-gather by recursive doubling)

    For recursive doubling and Rabenseifner with p not a power of two, use p' = 2^floor(log2 p)
    in the formula and add 2 * (alpha + n * beta) for folding the extra ranks in and out.
    A world of one rank costs 0 seconds.

    Raises ValueError for an unknown algorithm, world_size < 1, or negative nbytes, alpha, beta.
    """
    ### BEGIN SOLUTION
    if algorithm not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {algorithm!r}; expected one of {ALGORITHMS}")
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    if nbytes < 0 or alpha < 0 or beta < 0:
        raise ValueError("nbytes, alpha and beta must be non-negative")
    p, n = world_size, nbytes
    if p == 1:
        return 0.0
    if algorithm == "ring":
        return 2 * (p - 1) * alpha + 2 * (p - 1) / p * n * beta

    # Largest power of two <= p, and the cost of folding the extra ranks in and out.
    p2 = 1 << (p.bit_length() - 1)
    fold = 0.0 if p2 == p else 2 * (alpha + n * beta)
    steps = math.log2(p2)
    if algorithm == "recursive_doubling":
        return steps * (alpha + n * beta) + fold
    return 2 * steps * alpha + 2 * (p2 - 1) / p2 * n * beta + fold
    ### END SOLUTION
