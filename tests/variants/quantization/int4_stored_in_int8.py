"""A "4-bit" QuantizedTensor whose data is int8, one value per byte: every value is still
within half a step, but it stores twice the bytes of packed int4."""
# target: integer.py

_packed_quantize, _packed_dequantize = quantize, dequantize


def quantize(x, bits=8, symmetric=True, granularity="tensor", axis=0, group_size=128):
    qt = _packed_quantize(x, bits, symmetric, granularity, axis, group_size)
    if bits == 4:
        qt.data = unpack_int4(qt.data, x.numel()).reshape(x.shape)
    return qt


def dequantize(qt):
    if qt.bits == 4 and qt.data.dtype == torch.int8:
        qt = QuantizedTensor(**{**vars(qt), "data": pack_int4(qt.data)})
    return _packed_dequantize(qt)
