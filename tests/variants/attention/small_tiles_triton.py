"""flash_attention_triton with 16 x 16 tiles on the GPU too: still correct, but each program does
a sliver of work, so the kernels spend their time on loads and launches instead of tensor-core
products and fall well behind SDPA (the GPU timing check must fail it)."""
# target: flash_triton.py


def _blocks(head_dim):
    return 16, 16, max(16, triton.next_power_of_2(head_dim))
