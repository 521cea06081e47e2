# Your working copy: replace every `raise NotImplementedError` with your implementation.
# (Generated from the course's reference by `python -m grader sync`.)
"""Integer quantization: scale, zero point, granularity, int4 packing (lecture 06, sections 2-4).

A real value x is stored as an integer q with a scale s (and, asymmetric, a zero point z):

    q = clamp(round(x / s) + z, qmin, qmax)        x_hat = (q - z) * s

`quantize` returns a `QuantizedTensor`. It is an ordinary Python object, so it cannot travel
back to the grader as it is: the grader keeps it in the worker and asks for `to_dict()` (plain
tensors, numbers and strings) or passes it on to `dequantize`. Both helpers are given.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

SUPPORTED_BITS = (4, 8)
GRANULARITIES = ("tensor", "channel", "group")


@dataclass
class QuantizedTensor:
    """What `quantize` returns and `dequantize` reads.

    data        bits=8: int8, the original shape. bits=4: uint8, 1-D, `pack_int4` of the int4
                values taken in row-major order of the original shape (ceil(numel / 2) bytes).
    scale       float32, one per scale group (see `quantize` for the shape).
    zero_point  int8 of the same shape as `scale` (asymmetric), or None (symmetric: z = 0).
    shape       the original shape; bits, symmetric, granularity, group_size as passed, and
                axis made non-negative (axis % x.dim()).
    """

    data: torch.Tensor
    scale: torch.Tensor
    zero_point: torch.Tensor | None
    shape: tuple[int, ...]
    bits: int
    symmetric: bool
    granularity: str
    axis: int
    group_size: int

    def to_dict(self) -> dict:
        """The fields as plain values (tensors, ints, strings): what the grader reads."""
        return {
            "data": self.data,
            "scale": self.scale,
            "zero_point": self.zero_point,
            "shape": list(self.shape),
            "bits": self.bits,
            "symmetric": self.symmetric,
            "granularity": self.granularity,
            "axis": self.axis,
            "group_size": self.group_size,
        }


def integer_range(bits: int, symmetric: bool) -> tuple[int, int]:
    """(qmin, qmax): [-(2^(b-1) - 1), 2^(b-1) - 1] symmetric, [-2^(b-1), 2^(b-1) - 1] asymmetric."""
    qmax = 2 ** (bits - 1) - 1
    return (-qmax if symmetric else -qmax - 1), qmax


def scale_rows(x: torch.Tensor, granularity: str, axis: int, group_size: int) -> torch.Tensor:
    """A 2-D view of `x` (a copy where needed) in which each row shares one scale.

    tensor: one row. channel: row i = every element with index i along `axis`.
    group: rows of `group_size` consecutive elements of the last dimension.
    """
    if granularity == "tensor":
        return x.reshape(1, -1)
    if granularity == "channel":
        return x.movedim(axis, 0).reshape(x.shape[axis], -1)
    return x.reshape(-1, group_size)


def from_scale_rows(rows: torch.Tensor, shape: tuple[int, ...], granularity: str, axis: int) -> torch.Tensor:
    """The inverse of `scale_rows`: the rows back in `shape`."""
    if granularity == "channel":
        moved = list(shape)
        moved.insert(0, moved.pop(axis))
        return rows.reshape(moved).movedim(0, axis)
    return rows.reshape(shape)


def quantize(
    x: torch.Tensor,
    bits: int = 8,
    symmetric: bool = True,
    granularity: str = "tensor",
    axis: int = 0,
    group_size: int = 128,
) -> QuantizedTensor:
    """Quantize a floating-point tensor to `bits`-bit integers with round-to-nearest.

    Granularity (which elements share a scale), and the shape of `scale`:
      "tensor"   one scale for the whole tensor; shape ().
      "channel"  one per index along `axis` (axis 0 of a weight [out, in]: per output channel);
                 shape (x.shape[axis],).
      "group"    one per `group_size` consecutive elements of the last dimension;
                 shape (*x.shape[:-1], x.shape[-1] // group_size). The last dimension must be
                 a multiple of `group_size`: there are no partial groups.

    Per scale group, computed in float32:
      symmetric   s = max|x| / qmax, z = 0, integers in [-qmax, qmax] with qmax = 2^(b-1) - 1
      asymmetric  lo = min(min x, 0), hi = max(max x, 0), s = (hi - lo) / (qmax - qmin),
                  z = qmin - round(lo / s), integers in [qmin, qmax] = [-2^(b-1), 2^(b-1) - 1]
                  (widening the range to hold 0 makes 0.0 exactly representable: q = z)
      then q = clamp(round(x / s) + z, qmin, qmax) (torch.round: halves to even).
    A group whose values are all zero gets s = 1 (asymmetric: z = qmin by the formula), no NaN.
    Every in-range element then dequantizes to within s / 2 of its value.

    Raises ValueError for: bits not in (4, 8); an unknown granularity; an empty tensor; NaN or
    infinite values; `axis` out of range (channel); group_size < 1 or not dividing the last
    dimension (group).
    """
    raise NotImplementedError("implement quantize (lectures/06-quantization.md, section 2)")


def dequantize(qt: QuantizedTensor) -> torch.Tensor:
    """x_hat = (q - z) * s, float32, in the original shape (the inverse of `quantize`)."""
    raise NotImplementedError("implement dequantize (lectures/06-quantization.md, section 2)")


def pack_int4(q: torch.Tensor) -> torch.Tensor:
    """Pack signed 4-bit integers, two per byte: a 1-D uint8 tensor of ceil(numel / 2) bytes.

    `q` (any integer dtype, any shape) is taken in row-major order; its values must lie in
    [-8, 7] (else ValueError). Byte i holds element 2i in its low nibble and element 2i + 1 in
    its high nibble, each as 4-bit two's complement (-1 -> 0b1111). With an odd count, the high
    nibble of the last byte is 0.
    """
    raise NotImplementedError("implement pack_int4 (lectures/06-quantization.md, section 4)")


def unpack_int4(packed: torch.Tensor, numel: int) -> torch.Tensor:
    """The first `numel` signed values stored by `pack_int4`, as a 1-D int8 tensor.
    Raises ValueError when `numel` exceeds the 2 * packed.numel() values the bytes hold."""
    raise NotImplementedError("implement unpack_int4 (lectures/06-quantization.md, section 4)")
