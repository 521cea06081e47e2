"""Stage 2 swaps the parameter's and the gradient's byte counts, G * Psi + (P + K) * Psi / p: equal for the paper's P = G = 2, wrong for fp32 parameters with 16-bit gradients."""

# ruff: noqa: E501, F821 - a fragment appended to a solution file, whose names are in scope
# target: memory.py
# select: test_zero_memory
# fails: test_zero_memory_divides_each_stages_own_terms_when_every_byte_count_differs
# kind:
# message: expected stage 2's \(P\) \* Psi \+ \(G \+ K\) \* Psi / p = .*, which is \(G\) \* Psi \+ \(P \+ K\) \* Psi / p

_reference_memory = zero_memory_per_rank


def zero_memory_per_rank(
    num_params, world_size, stage, bytes_per_param=2, bytes_per_grad=2, optimizer_bytes_per_param=12
):
    if stage == 2 and world_size >= 1:
        return float(num_params * (bytes_per_grad + (bytes_per_param + optimizer_bytes_per_param) / world_size))
    return _reference_memory(num_params, world_size, stage, bytes_per_param, bytes_per_grad, optimizer_bytes_per_param)
