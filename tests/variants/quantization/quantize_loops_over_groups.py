"""quantize computes each group's scale in a Python loop over the groups: the same numbers,
but the number of operators grows with the number of groups."""
# target: integer.py

_vectorised_quantize = quantize


def quantize(x, bits=8, symmetric=True, granularity="tensor", axis=0, group_size=128):
    qt = _vectorised_quantize(x, bits, symmetric, granularity, axis, group_size)
    if granularity != "group":
        return qt
    qmin, qmax = integer_range(bits, symmetric)
    groups = scale_rows(x.float(), granularity, axis, group_size)
    scales, zeros = [], []
    for row in groups:
        lo, hi = row.min().clamp(max=0), row.max().clamp(min=0)
        scale = row.abs().max() / qmax if symmetric else (hi - lo) / (qmax - qmin)
        scale = scale if scale > 0 else torch.ones(())
        scales.append(scale)
        zeros.append(torch.zeros(()) if symmetric else qmin - torch.round(lo / scale))
    qt.scale = torch.stack(scales).reshape(qt.scale.shape)
    if not symmetric:
        qt.zero_point = torch.stack(zeros).to(torch.int8).reshape(qt.scale.shape)
    return qt
