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
    ### BEGIN SOLUTION
    M, K = x.shape
    N = scale.shape[0]
    if K % group_size or group_size % 16 or packed.numel() != N * K // 2:
        raise ValueError(f"shapes do not fit: x {tuple(x.shape)}, {packed.numel()} bytes, scale {tuple(scale.shape)}")
    # Split-K: program (j, s, i) sums slice s of K for output tile (i, j) into partial[s] in float32;
    # the SPLIT_K slices are then added in a fixed order (deterministic, unlike atomic adds).
    partial = torch.empty(MAX_SPLIT_K, M, N, dtype=torch.float32, device=x.device)

    def grid(config: dict) -> tuple[int, int, int]:  # it depends on the tiles the autotuner picks
        return triton.cdiv(N, config["BLOCK_N"]), config["SPLIT_K"], triton.cdiv(M, config["BLOCK_M"])

    _w4a16_kernel[grid](
        x, packed, scale.contiguous(), partial, M, N, K,
        x.stride(0), x.stride(1), partial.stride(0), partial.stride(1),
        GROUP_SIZE=group_size, PRECISION="ieee" if x.dtype == torch.float32 else "tf32",  # exact float32 products
    )  # fmt: skip
    split_k = _w4a16_kernel.best_config.kwargs["SPLIT_K"]  # the configuration that just ran
    return partial[:split_k].sum(0).to(x.dtype)
    ### END SOLUTION


### BEGIN SOLUTION
# Decoding multiplies a few rows of x (M = 16) by every weight: the time is the time to read the
# packed weight (N * K / 2 bytes) once, so the grid must keep every SM streaming bytes. With tiles
# of BLOCK_N output columns alone, 8192 columns make 64-256 programs, one or two per SM, each walking
# all of K; split-K multiplies the programs by SPLIT_K, each walking K / SPLIT_K, at the price of
# writing SPLIT_K float32 partial sums of the small [M, N] output and adding them up after.
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
# (BLOCK_M, BLOCK_N, BLOCK_K, SPLIT_K, num_warps, num_stages): decode tiles (BLOCK_M = 16, the
# least tl.dot takes), split 2-8 ways, and one wide tile for prefill-sized M; the first is the
# default. Under the interpreter, where every program runs in turn on the CPU, no candidate is
# timed: the widest BLOCK_K that divides the group size is taken (16 divides them all), and
# SPLIT_K = 2 runs the reduction in every test.
W4A16_CANDIDATES = [
    (16, 64, 128, 4, 4, 4),
    (16, 64, 128, 8, 4, 4),
    (16, 128, 128, 4, 4, 4),
    (16, 64, 64, 8, 4, 4),
    (16, 128, 64, 2, 4, 4),
    (64, 64, 64, 1, 4, 3),
]
if INTERPRETED:
    W4A16_CANDIDATES = [(16, 32, 64, 2, 1, 1), (16, 32, 32, 2, 1, 1), (16, 32, 16, 2, 1, 1)]
W4A16_CONFIGS = [
    triton.Config({"BLOCK_M": m, "BLOCK_N": n, "BLOCK_K": k, "SPLIT_K": split}, num_warps=warps, num_stages=stages)
    for m, n, k, split, warps, stages in W4A16_CANDIDATES
]
MAX_SPLIT_K = max(config.kwargs["SPLIT_K"] for config in W4A16_CONFIGS)
TUNE_FROM = 4096 * 4096  # weights (N * K) from which the candidates are timed


def _prune(configs: list[triton.Config], named_args: dict, **kwargs) -> list[triton.Config]:
    """The candidates whose BLOCK_K divides the group size, so that every K block lies in one group
    and needs one scale per column (BLOCK_K = 16 divides any valid group size). A small weight takes
    the first of them, untimed: each candidate is compiled before it is timed (seconds), which a
    small product never wins back."""
    arguments = {**named_args, **kwargs}
    group = arguments["GROUP_SIZE"]
    fitting = [c for c in configs if group % c.kwargs["BLOCK_K"] == 0]
    fitting = fitting or [triton.Config({**configs[0].kwargs, "BLOCK_K": 16}, num_warps=4, num_stages=4)]
    return fitting if arguments["N"] * arguments["K"] >= TUNE_FROM and not INTERPRETED else fitting[:1]


@triton.autotune(
    configs=W4A16_CONFIGS, key=["M", "N", "K", "GROUP_SIZE"], prune_configs_by={"early_config_prune": _prune}
)
@triton.jit
def _w4a16_kernel(
    x_ptr, w_ptr, s_ptr, partial_ptr, M, N, K,
    stride_xm, stride_xk, stride_ps, stride_pm,
    GROUP_SIZE: tl.constexpr, PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SPLIT_K: tl.constexpr,
):  # fmt: skip
    """partial[s, m, n] = sum over k in slice s of x[m, k] * q[n, k] * scale[n, k // GROUP_SIZE],
    for one BLOCK_M x BLOCK_N tile (Triton adds x's dtype to the autotuning key).

    BLOCK_K divides GROUP_SIZE, so a K block lies inside one group: its product with the integer
    weights is scaled once per output column, x q^T * scale[n], instead of rescaling every weight;
    and K (a multiple of the group size) is a whole number of K blocks: no mask along K."""
    rn = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    split = tl.program_id(1)
    rm = tl.program_id(2) * BLOCK_M + tl.arange(0, BLOCK_M)
    n_ok = rn < N
    # This program's slice of K: a whole number of K blocks, SPLIT_K slices cover K (the last ones
    # may be short, or empty when K is small; an empty slice writes zeros).
    per_split = tl.cdiv(tl.cdiv(K, BLOCK_K), SPLIT_K) * BLOCK_K
    k_lo = split * per_split
    k_hi = tl.minimum(K, k_lo + per_split)
    groups = K // GROUP_SIZE
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(k_lo, k_hi, BLOCK_K):
        kk = k0 + tl.arange(0, BLOCK_K)
        x = tl.load(x_ptr + rm[:, None] * stride_xm + kk[None, :] * stride_xk, mask=rm[:, None] < M, other=0.0)
        # Byte j of row n holds q[n, 2j] in its low nibble and q[n, 2j + 1] in its high one: load the
        # block's BLOCK_K / 2 bytes per row as they lie, consecutive along K (coalesced).
        j = k0 // 2 + tl.arange(0, BLOCK_K // 2)
        byte = tl.load(w_ptr + rn[:, None] * (K // 2) + j[None, :], mask=n_ok[:, None], other=0).to(tl.int32)
        low, high = byte & 0xF, byte >> 4
        low, high = low - ((low & 8) << 1), high - ((high & 8) << 1)  # 4-bit two's complement: -8..7
        # Interleave in registers: join makes [BLOCK_N, BLOCK_K / 2, 2], whose row-major reshape puts
        # q[n, 2j] then q[n, 2j + 1]: the [BLOCK_N, BLOCK_K] integer tile, exact in x's dtype.
        q = tl.reshape(tl.join(low, high), (BLOCK_N, BLOCK_K)).to(x.dtype)
        scale = tl.load(s_ptr + rn * groups + k0 // GROUP_SIZE, mask=n_ok, other=0.0)  # this block's group
        acc += tl.dot(x, tl.trans(q), input_precision=PRECISION) * scale[None, :]
    out_mask = (rm[:, None] < M) & n_ok[None, :]
    tl.store(partial_ptr + split * stride_ps + rm[:, None] * stride_pm + rn[None, :], acc, mask=out_mask)


### END SOLUTION


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
        ### BEGIN SOLUTION
        if bits not in (4, 8):
            raise ValueError(f"QuantLinear supports bits 4 and 8, got {bits}")
        granularity = "channel" if bits == 8 else "group"
        self.qweight: QuantizedTensor = quantize(
            weight.detach(), bits=bits, granularity=granularity, axis=0, group_size=group_size
        )
        self.bias = None if bias is None else nn.Parameter(bias.detach().clone(), requires_grad=False)
        self.in_features, self.out_features = weight.shape[1], weight.shape[0]
        ### END SOLUTION

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
        ### BEGIN SOLUTION
        rows = x.reshape(-1, self.in_features)
        qw = self.qweight
        if qw.bits == 4 and x.is_cuda:
            out = w4a16_matmul(rows, qw.data, qw.scale, qw.group_size)
        else:
            out = rows @ dequantize(qw).to(x.dtype).T
        if self.bias is not None:
            out = out + self.bias.to(x.dtype)
        return out.reshape(*x.shape[:-1], self.out_features)
        ### END SOLUTION
