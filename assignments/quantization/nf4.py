# Your working copy: replace every `raise NotImplementedError` with your implementation.
# (Generated from the course's reference by `python -m grader sync`.)
"""4-bit NormalFloat (NF4) with blockwise absmax scaling (lecture 06, section 5).

QLoRA (Dettmers et al., 2023) stores each weight as the index of the nearest of 16 fixed code
values, after dividing its block of `block_size` consecutive weights by the block's largest
magnitude. The code values are quantiles of a standard normal distribution, rescaled to
[-1, 1], with an exact 0: for normally distributed weights every code is used equally often.
"""

from __future__ import annotations

import math

import torch

# The published NF4 code values (QLoRA, Appendix E; bitsandbytes), index 0 to 15.
NF4_CODE = torch.tensor(
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


def quantize_nf4(x: torch.Tensor, block_size: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (codes, absmax): NF4 indices packed two per byte, and one float32 per block.

    x is taken in row-major order and cut into blocks of `block_size` consecutive elements;
    the last block is shorter when block_size does not divide x.numel().
      absmax[b] = max |x| over block b (float32), shape (ceil(numel / block_size),)
      index     = the i in 0..15 minimising |x / absmax[b] - NF4_CODE[i]| (a block of zeros
                  has absmax 0 and every index 7, the code 0.0)
      codes     = uint8, 1-D, ceil(numel / 2) bytes: byte j holds the index of element 2j in
                  its low nibble and that of element 2j + 1 in its high nibble (0 if absent).
    Raises ValueError for an empty tensor, NaN or infinite values, or block_size < 1.
    """
    raise NotImplementedError("implement quantize_nf4 (lectures/06-quantization.md, section 5)")


# (Write any helper functions you need here.)


def dequantize_nf4(
    codes: torch.Tensor, absmax: torch.Tensor, shape: tuple[int, ...], block_size: int = 64
) -> torch.Tensor:
    """x_hat = NF4_CODE[index] * absmax[block], float32, in `shape` (inverse of quantize_nf4)."""
    raise NotImplementedError("implement dequantize_nf4 (lectures/06-quantization.md, section 5)")
