# Your working copy: replace every `raise NotImplementedError` with your implementation.
# (Generated from the course's reference by `python -m grader sync`.)
"""Weight-only quantized linear layer and the W4A16 Triton kernel (lecture 06, section 7).

Decoding one token at a time multiplies a few activation rows by every weight of the model:
the time goes into reading the weights from memory, not into arithmetic. Storing the weights
in 4 bits reads 4x fewer bytes than bf16; the kernel unpacks and rescales them in registers,
right before the multiply, so the full-precision weight matrix never exists in memory.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl
from integer import QuantizedTensor, dequantize, quantize
from torch import nn


def w4a16_matmul(x: torch.Tensor, packed: torch.Tensor, scale: torch.Tensor, group_size: int) -> torch.Tensor:
    """x @ W.T for a symmetric int4 weight W [N, K] quantized per group, in one Triton kernel.

    x       [M, K] activations (float16, bfloat16 or float32; Triton's CPU interpreter
            handles float32 and float16 only)
    packed  uint8 [N * K / 2]: `pack_int4` of the int4 values of W in row-major order, i.e.
            byte n * K / 2 + k // 2 holds W's integer at (n, k) (low nibble for even k)
    scale   float32 [N, K / group_size]: W[n, k] = q[n, k] * scale[n, k // group_size]
    Returns [M, N] in x's dtype. The kernel reads the packed bytes and dequantizes them in
    registers inside the matmul loop (accumulating in float32): W in full precision is never
    written to memory. The kernel may split K among its programs (split-K) and leave float32
    partial sums that are added up after it. x may be any strided view: read only its K
    columns. Raises ValueError when K is not a multiple of group_size, group_size is not a
    multiple of 16, or packed does not hold N * K / 2 bytes. Under TRITON_INTERPRET=1 (CPU) it
    runs in Triton's interpreter: use small shapes.
    Write the @triton.jit kernel it launches as a helper in this file (lecture section 7
    sketches its loop over K).
    """
    raise NotImplementedError("implement w4a16_matmul (lectures/06-quantization.md, section 7)")


# (Write any helper functions you need here.)


class QuantLinear(nn.Module):
    """A linear layer y = x W^T + b whose weight is stored quantized (weight-only quantization).

    bits=8: W quantized symmetric per output channel (granularity "channel", axis 0).
    bits=4: W quantized symmetric per group of `group_size` consecutive input features
            (granularity "group"); in_features must be a multiple of group_size.
    The quantized weight is kept as `self.qweight` (a QuantizedTensor); the bias, if any, in
    full precision as `self.bias`. No full-precision copy of W is kept.
    """

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None, bits: int = 8, group_size: int = 128):
        """Quantize `weight` [out_features, in_features]; raises ValueError for bits not in (4, 8)
        or a group size that does not fit (as `quantize` does)."""
        super().__init__()
        raise NotImplementedError("implement QuantLinear.__init__ (lectures/06-quantization.md, section 7)")

    @classmethod
    def from_float(cls, linear: nn.Linear, bits: int = 8, group_size: int = 128) -> QuantLinear:
        """The quantized version of an nn.Linear."""
        return cls(linear.weight, linear.bias, bits=bits, group_size=group_size)

    def weight_fields(self) -> dict:
        """self.qweight as plain values (what the grader reads back)."""
        return self.qweight.to_dict()

    def stored_tensors(self) -> dict[str, torch.Tensor]:
        """Every tensor the layer holds: parameters, buffers, tensor attributes and the fields
        of self.qweight (what the grader counts as the layer's storage)."""
        held = {f"qweight.{k}": v for k, v in self.qweight.to_dict().items() if isinstance(v, torch.Tensor)}
        held.update(self.state_dict())
        held.update({k: v for k, v in vars(self).items() if isinstance(v, torch.Tensor)})
        return held

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [..., in_features] -> [..., out_features] in x's dtype.

        Equal to x @ dequantize(self.qweight).T + bias (computed in x's dtype). On a GPU with
        bits=4 it must run `w4a16_matmul` instead of materialising the dequantized weight.
        """
        raise NotImplementedError("implement QuantLinear.forward (lectures/06-quantization.md, section 7)")
