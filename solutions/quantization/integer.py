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
    ### BEGIN SOLUTION
    if bits not in SUPPORTED_BITS:
        raise ValueError(f"bits must be one of {SUPPORTED_BITS}, got {bits}")
    if granularity not in GRANULARITIES:
        raise ValueError(f"granularity must be one of {GRANULARITIES}, got {granularity!r}")
    if x.numel() == 0:
        raise ValueError("cannot quantize an empty tensor")
    if not torch.isfinite(x).all():
        raise ValueError("cannot quantize NaN or infinite values")
    if granularity != "tensor" and x.dim() == 0:
        raise ValueError(f"{granularity} quantization needs a tensor of at least one dimension")
    if granularity == "channel" and not -x.dim() <= axis < x.dim():
        raise ValueError(f"axis {axis} is out of range for a tensor of shape {tuple(x.shape)}")
    if granularity == "group" and (group_size < 1 or x.shape[-1] % group_size):
        raise ValueError(f"group_size {group_size} does not divide the last dimension of {tuple(x.shape)}")

    axis = axis % x.dim() if x.dim() else 0
    qmin, qmax = integer_range(bits, symmetric)
    rows = scale_rows(x.float(), granularity, axis, group_size)  # [scale groups, elements]
    if symmetric:
        scale = rows.abs().amax(dim=1) / qmax
        scale = torch.where(scale > 0, scale, torch.ones_like(scale))
        zero = torch.zeros_like(scale)
    else:
        lo = rows.amin(dim=1).clamp(max=0)
        hi = rows.amax(dim=1).clamp(min=0)
        scale = (hi - lo) / (qmax - qmin)
        scale = torch.where(scale > 0, scale, torch.ones_like(scale))
        zero = qmin - torch.round(lo / scale)
    q = torch.clamp(torch.round(rows / scale[:, None]) + zero[:, None], qmin, qmax).to(torch.int8)
    q = from_scale_rows(q, tuple(x.shape), granularity, axis)

    if granularity == "group":
        scale_shape: tuple[int, ...] = (*x.shape[:-1], x.shape[-1] // group_size)
    elif granularity == "channel":
        scale_shape = (x.shape[axis],)
    else:
        scale_shape = ()
    return QuantizedTensor(
        data=pack_int4(q) if bits == 4 else q,
        scale=scale.reshape(scale_shape),
        zero_point=None if symmetric else zero.to(torch.int8).reshape(scale_shape),
        shape=tuple(x.shape),
        bits=bits,
        symmetric=symmetric,
        granularity=granularity,
        axis=axis,
        group_size=group_size,
    )
    ### END SOLUTION


def dequantize(qt: QuantizedTensor) -> torch.Tensor:
    """x_hat = (q - z) * s, float32, in the original shape (the inverse of `quantize`)."""
    ### BEGIN SOLUTION
    q = unpack_int4(qt.data, math.prod(qt.shape)) if qt.bits == 4 else qt.data
    q = q.reshape(qt.shape)
    rows = scale_rows(q.float(), qt.granularity, qt.axis, qt.group_size)
    scale = qt.scale.reshape(-1, 1).float()
    zero = qt.zero_point.reshape(-1, 1).float() if qt.zero_point is not None else 0.0
    return from_scale_rows((rows - zero) * scale, qt.shape, qt.granularity, qt.axis)
    ### END SOLUTION


def pack_int4(q: torch.Tensor) -> torch.Tensor:
    """Pack signed 4-bit integers, two per byte: a 1-D uint8 tensor of ceil(numel / 2) bytes.

    `q` (any integer dtype, any shape) is taken in row-major order; its values must lie in
    [-8, 7] (else ValueError). Byte i holds element 2i in its low nibble and element 2i + 1 in
    its high nibble, each as 4-bit two's complement (-1 -> 0b1111). With an odd count, the high
    nibble of the last byte is 0.
    """
    ### BEGIN SOLUTION
    if q.is_floating_point() or q.is_complex():
        raise ValueError(f"pack_int4 takes integers, got {q.dtype}")
    flat = q.reshape(-1).to(torch.int16)
    if flat.numel() and (flat.min() < -8 or flat.max() > 7):
        raise ValueError("pack_int4 takes values in [-8, 7]")
    nibbles = flat & 0xF  # two's complement in the low 4 bits
    if nibbles.numel() % 2:
        nibbles = torch.cat([nibbles, nibbles.new_zeros(1)])
    pairs = nibbles.reshape(-1, 2)
    return (pairs[:, 0] | (pairs[:, 1] << 4)).to(torch.uint8)
    ### END SOLUTION


def unpack_int4(packed: torch.Tensor, numel: int) -> torch.Tensor:
    """The first `numel` signed values stored by `pack_int4`, as a 1-D int8 tensor.
    Raises ValueError when `numel` exceeds the 2 * packed.numel() values the bytes hold."""
    ### BEGIN SOLUTION
    if numel > 2 * packed.numel():
        raise ValueError(f"{packed.numel()} bytes hold at most {2 * packed.numel()} values, not {numel}")
    as_int = packed.reshape(-1).to(torch.int16)
    nibbles = torch.stack([as_int & 0xF, as_int >> 4], dim=1).reshape(-1)[:numel]
    return (nibbles - ((nibbles & 0x8) << 1)).to(torch.int8)  # sign-extend bit 3
    ### END SOLUTION
