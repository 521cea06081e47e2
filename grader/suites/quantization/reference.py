"""Trusted references for the quantization suite, run in the grader (or a trusted worker),
never importing the submission: the lecture's formulas written independently, counted bytes,
and a bf16 matmul to time the W4A16 kernel against."""

from __future__ import annotations

import math

import torch

# The published NF4 code values (Dettmers et al. 2023, QLoRA, Appendix E; bitsandbytes).
NF4 = torch.tensor(
    [
        -1.0,
        -0.6961928009986877,
        -0.5250730514526367,
        -0.39491748809814453,
        -0.28444138169288635,
        -0.18477343022823334,
        -0.09105003625154495,
        0.0,
        0.07958029955625534,
        0.16093020141124725,
        0.24611230194568634,
        0.33791524171829224,
        0.44070982933044434,
        0.5626170039176941,
        0.7229568362236023,
        1.0,
    ]
)


def rows(x: torch.Tensor, granularity: str, axis: int, group_size: int) -> torch.Tensor:
    """Elements sharing a scale, one row per scale group (in the order of the scale tensor)."""
    if granularity == "tensor":
        return x.reshape(1, -1)
    if granularity == "channel":
        return x.movedim(axis, 0).reshape(x.shape[axis], -1)
    return x.reshape(-1, group_size)


def expected_scales(
    x: torch.Tensor, bits: int, symmetric: bool, granularity: str, axis: int = 0, group_size: int = 128
):
    """(scale, zero point) per row of `rows`, by the formulas of quantize's docstring."""
    r = rows(x.float(), granularity, axis, group_size)
    qmax = 2 ** (bits - 1) - 1
    if symmetric:
        scale = r.abs().amax(1) / qmax
        scale = torch.where(scale > 0, scale, torch.ones_like(scale))
        return scale, torch.zeros_like(scale)
    qmin = -qmax - 1
    lo, hi = r.amin(1).clamp(max=0), r.amax(1).clamp(min=0)
    scale = (hi - lo) / (qmax - qmin)
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    return scale, qmin - torch.round(lo / scale)


def unpack(packed: torch.Tensor, numel: int, signed: bool = True) -> torch.Tensor:
    """Nibbles of `packed`, element 2i in the low nibble of byte i, as int64."""
    b = packed.reshape(-1).to(torch.int64)
    nibbles = torch.stack([b & 0xF, b >> 4], 1).reshape(-1)[:numel]
    return nibbles - 16 * (nibbles >= 8) if signed else nibbles


def integers(fields: dict) -> torch.Tensor:
    """The integer values of a QuantizedTensor's fields, in its original shape."""
    numel = math.prod(fields["shape"])
    data = fields["data"]
    q = unpack(data, numel) if fields["bits"] == 4 else data.to(torch.int64)
    return q.reshape(fields["shape"])


def dequantize(fields: dict) -> torch.Tensor:
    """(q - z) * s from the returned fields, computed here."""
    g, axis, size = fields["granularity"], fields["axis"], fields["group_size"]
    q = rows(integers(fields).double(), g, axis, size)
    scale = fields["scale"].double().reshape(-1, 1)
    zero = 0.0 if fields["zero_point"] is None else fields["zero_point"].double().reshape(-1, 1)
    out = (q - zero) * scale
    shape = list(fields["shape"])
    if g == "channel":
        moved = [shape[axis], *shape[:axis], *shape[axis + 1 :]]
        return out.reshape(moved).movedim(0, axis)
    return out.reshape(shape)


def nbytes(value) -> int:
    """Bytes of every tensor in a (nested) returned value: numel * element_size."""
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, dict):
        return sum(nbytes(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(nbytes(v) for v in value)
    return 0


def sqnr_db(x: torch.Tensor, x_hat: torch.Tensor) -> float:
    x, x_hat = x.double(), x_hat.double()
    return float(10 * torch.log10(x.pow(2).sum() / (x - x_hat).pow(2).sum()))


def weights_with_outliers(rows_: int, cols: int, gen: torch.Generator, outliers: int = 8, size: float = 50.0):
    """Gaussian weights (std 0.02) with a few large outliers, as in LLM weight matrices."""
    w = torch.randn(rows_, cols, generator=gen) * 0.02
    index = torch.randperm(w.numel(), generator=gen)[:outliers]
    w.view(-1)[index] = size * 0.02 * torch.sign(torch.randn(outliers, generator=gen))
    return w


def bf16_matmul_seconds(x: torch.Tensor, w: torch.Tensor, repeats: int) -> float:
    """Seconds per x @ w.T in bf16 on the GPU (CUDA events, after a warm-up): the reference
    the W4A16 kernel is timed against, in a trusted worker."""
    x, w = x.cuda().bfloat16(), w.cuda().bfloat16()
    for _ in range(3):
        x @ w.T
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeats):
        x @ w.T
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1e3 / repeats
