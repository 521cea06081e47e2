"""activation_bytes_per_layer that divides by t with //: exact whenever t divides the layer's bytes, as in every row of the paper's examples, but a byte count per GPU need not be whole, and (3, 1, 5, 1, tp=2) loses half a byte."""

# ruff: noqa: E501 - a fragment appended to a solution file, whose names are in scope
# target: memory.py
# select: fraction_where_a_split
# fails: test_memory_keeps_the_fraction_where_a_split_does_not_divide
# kind:
# message: activation_bytes_per_layer\(3, 1, 5, 1, tp=2, sequence_parallel=False\) = 352, expected 352\.5: divide by t with /, not //


def activation_bytes_per_layer(seq_len, micro_batch, d_model, num_heads, tp, sequence_parallel, selective_recompute):
    s, b, h, a, t = seq_len, micro_batch, d_model, num_heads, tp
    scores = 0 if selective_recompute else 5 * a * s * s * b
    if sequence_parallel:
        return (34 * s * b * h + scores) // t
    return 10 * s * b * h + (24 * s * b * h + scores) // t
