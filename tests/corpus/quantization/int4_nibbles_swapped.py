"""pack_int4 puts element 2i in the high nibble and unpack_int4 agrees: round trips pass, the byte layout is wrong."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: integer.py
# select: pack_int4 or w4a16_kernel_matches and g32 or w4a16_kernel_small
# fails: all_16_values
# kind:
# message: low nibble first: 16 of 16 elements differ|byte 0 holds -8 \(0b1000\) low

_correct_pack_int4 = pack_int4
_correct_unpack_int4 = unpack_int4


def _swap(packed):
    return ((packed << 4) | (packed >> 4)).to(torch.uint8)


def pack_int4(q):
    return _swap(_correct_pack_int4(q))


def unpack_int4(packed, numel):
    return _correct_unpack_int4(_swap(packed), numel)
