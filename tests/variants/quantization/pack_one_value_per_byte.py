"""pack_int4 keeps one value per byte: lossless, but twice the storage of real packing."""
# target: integer.py


def pack_int4(q):
    if q.numel() and (q.min() < -8 or q.max() > 7):
        raise ValueError("pack_int4 takes values in [-8, 7]")
    return (q.reshape(-1).to(torch.int16) & 0xF).to(torch.uint8)


def unpack_int4(packed, numel):
    nibbles = packed.reshape(-1)[:numel].to(torch.int16)
    return (nibbles - ((nibbles & 0x8) << 1)).to(torch.int8)
