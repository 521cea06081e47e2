"""w4a16_matmul that unpacks the whole weight into a bf16 matrix with torch operators and then
calls a dense matmul: correct, but it writes and re-reads the full-precision weight, which is
exactly the memory traffic the fused kernel exists to avoid."""
# target: linear.py


def w4a16_matmul(x, packed, scale, group_size):
    n, k = scale.shape[0], packed.numel() * 2 // scale.shape[0]
    b = packed.to(torch.int16)
    nibbles = torch.stack([b & 0xF, b >> 4], dim=1).reshape(n, k)
    q = nibbles - ((nibbles & 8) << 1)
    w = q.to(x.dtype) * scale.repeat_interleave(group_size, dim=1).to(x.dtype)
    return x @ w.T
