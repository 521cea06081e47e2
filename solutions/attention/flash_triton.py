"""FlashAttention-2 as Triton kernels (lecture 03-attention, section 5).

One program of the forward kernel owns BLOCK_M query rows of one (batch, head) and walks over
the keys BLOCK_N at a time with the online softmax, keeping its tiles in on-chip memory; it
writes out and lse once. The backward is two kernels, as in FlashAttention-2: one program per
block of keys accumulates dK and dV (walking over queries), one program per block of queries
accumulates dQ (walking over keys); both recompute P = exp(S - lse).

Inputs are like reference.attention: q (B, H, Nq, d), k and v (B, Hkv, Nk, d), H a multiple of
Hkv (GQA), causal aligned to the end of the keys, any Nq and Nk, head_dim 16 to 128. Work in
float32 inside the kernels; out has q's dtype, lse is float32. On a machine without a GPU the
grader runs these kernels in the Triton interpreter (TRITON_INTERPRET=1), slowly: keep shapes
small there.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl
from reference import check_shapes

### BEGIN SOLUTION
LOG2E = 1.4426950408889634  # exp(x) = exp2(x * log2(e)): exp2 is the fast hardware instruction


@triton.jit
def _mask(s, rows, cols, n_k, offset, CAUSAL: tl.constexpr):
    """`s` (rows x cols) with -inf at padding keys (j >= n_k) and above the diagonal (j > i + offset)."""
    keep = cols[None, :] < n_k
    if CAUSAL:
        keep = keep & (cols[None, :] <= rows[:, None] + offset)
    return tl.where(keep, s, float("-inf"))


@triton.jit
def _forward_kernel(
    Q, K, V, OUT, LSE,
    stride_qb, stride_qh, stride_qm,
    stride_kb, stride_kh, stride_kn,
    stride_ob, stride_oh, stride_om,
    n_heads, group, n_q, n_k, head_dim, scale_log2,
    CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    PRECISION: tl.constexpr,
):  # fmt: skip
    block, bh = tl.program_id(0), tl.program_id(1)
    b, h = bh // n_heads, bh % n_heads
    offset = n_k - n_q  # causal: query i sees keys j <= i + offset
    offs_m = block * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d[None, :] < head_dim
    q_ptrs = Q + b * stride_qb + h * stride_qh + offs_m[:, None] * stride_qm + offs_d[None, :]
    q = tl.load(q_ptrs, mask=(offs_m[:, None] < n_q) & d_ok, other=0.0)
    kv = b * stride_kb + (h // group) * stride_kh  # GQA: this head's key/value head
    k_ptrs = K + kv + offs_n[:, None] * stride_kn + offs_d[None, :]
    v_ptrs = V + kv + offs_n[:, None] * stride_kn + offs_d[None, :]

    m = tl.full([BLOCK_M], float("-inf"), tl.float32)  # running max (base 2)
    denom = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    end = n_k
    if CAUSAL:  # keys beyond the last row's diagonal are masked for the whole block
        end = tl.minimum(n_k, block * BLOCK_M + BLOCK_M + offset)
    for start in range(0, end, BLOCK_N):
        cols = start + offs_n
        k = tl.load(k_ptrs + start * stride_kn, mask=(cols[:, None] < n_k) & d_ok, other=0.0)
        s = _mask(tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale_log2, offs_m, cols, n_k, offset, CAUSAL)
        m_new = tl.maximum(m, tl.max(s, 1))
        p = tl.math.exp2(s - m_new[:, None])
        correction = tl.math.exp2(m - m_new)
        denom = denom * correction + tl.sum(p, 1)
        v = tl.load(v_ptrs + start * stride_kn, mask=(cols[:, None] < n_k) & d_ok, other=0.0)
        acc = acc * correction[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
        m = m_new
    out = acc / denom[:, None]
    o_ptrs = OUT + b * stride_ob + h * stride_oh + offs_m[:, None] * stride_om + offs_d[None, :]
    tl.store(o_ptrs, out.to(OUT.dtype.element_ty), mask=(offs_m[:, None] < n_q) & d_ok)
    lse = (m + tl.math.log2(denom)) / 1.4426950408889634  # back to natural log
    tl.store(LSE + bh * n_q + offs_m, lse, mask=offs_m < n_q)


@triton.jit
def _backward_dkdv_kernel(
    Q, K, V, DO, LSE, D, DK, DV,
    stride_qb, stride_qh, stride_qm,
    stride_kb, stride_kh, stride_kn,
    n_heads, group, n_q, n_k, head_dim, scale, scale_log2,
    CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    PRECISION: tl.constexpr,
):  # fmt: skip
    """One program: BLOCK_N keys of query head h. dK and dV are per query head (B, H, Nk, d);
    the caller sums each GQA group."""
    block, bh = tl.program_id(0), tl.program_id(1)
    b, h = bh // n_heads, bh % n_heads
    offset = n_k - n_q
    offs_n = block * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d[None, :] < head_dim
    n_ok = (offs_n[:, None] < n_k) & d_ok
    kv = b * stride_kb + (h // group) * stride_kh
    k = tl.load(K + kv + offs_n[:, None] * stride_kn + offs_d[None, :], mask=n_ok, other=0.0)
    v = tl.load(V + kv + offs_n[:, None] * stride_kn + offs_d[None, :], mask=n_ok, other=0.0)
    dk = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
    qo = b * stride_qb + h * stride_qh  # q, dO share strides (both contiguous, same shape)
    start_m = 0
    if CAUSAL:  # queries before the first key's diagonal see none of these keys
        start_m = tl.maximum(0, block * BLOCK_N - offset) // BLOCK_M * BLOCK_M
    for start in range(start_m, n_q, BLOCK_M):
        rows = start + offs_m
        m_ok = rows < n_q
        q = tl.load(Q + qo + rows[:, None] * stride_qm + offs_d[None, :], mask=m_ok[:, None] & d_ok, other=0.0)
        do = tl.load(DO + qo + rows[:, None] * stride_qm + offs_d[None, :], mask=m_ok[:, None] & d_ok, other=0.0)
        lse = tl.load(LSE + bh * n_q + rows, mask=m_ok, other=0.0)
        delta = tl.load(D + bh * n_q + rows, mask=m_ok, other=0.0)
        # P^T directly: (BLOCK_N, BLOCK_M), so no transpose of the big tile is needed.
        st = tl.dot(k, tl.trans(q), input_precision=PRECISION) * scale_log2
        keep = (offs_n[:, None] < n_k) & m_ok[None, :]
        if CAUSAL:
            keep = keep & (offs_n[:, None] <= rows[None, :] + offset)
        pt = tl.where(keep, tl.math.exp2(st - lse[None, :] * 1.4426950408889634), 0.0)
        dv += tl.dot(pt.to(do.dtype), do, input_precision=PRECISION)
        dpt = tl.dot(v, tl.trans(do), input_precision=PRECISION)
        dst = pt * (dpt - delta[None, :])
        dk += tl.dot(dst.to(q.dtype), q, input_precision=PRECISION)
    out = bh * n_k * head_dim + offs_n[:, None] * head_dim + offs_d[None, :]
    tl.store(DK + out, (dk * scale).to(DK.dtype.element_ty), mask=n_ok)
    tl.store(DV + out, dv.to(DV.dtype.element_ty), mask=n_ok)


@triton.jit
def _backward_dq_kernel(
    Q, K, V, DO, LSE, D, DQ,
    stride_qb, stride_qh, stride_qm,
    stride_kb, stride_kh, stride_kn,
    n_heads, group, n_q, n_k, head_dim, scale, scale_log2,
    CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    PRECISION: tl.constexpr,
):  # fmt: skip
    block, bh = tl.program_id(0), tl.program_id(1)
    b, h = bh // n_heads, bh % n_heads
    offset = n_k - n_q
    offs_m = block * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d[None, :] < head_dim
    m_ok = offs_m < n_q
    qo = b * stride_qb + h * stride_qh + offs_m[:, None] * stride_qm + offs_d[None, :]
    q = tl.load(Q + qo, mask=m_ok[:, None] & d_ok, other=0.0)
    do = tl.load(DO + qo, mask=m_ok[:, None] & d_ok, other=0.0)
    lse = tl.load(LSE + bh * n_q + offs_m, mask=m_ok, other=0.0) * 1.4426950408889634
    delta = tl.load(D + bh * n_q + offs_m, mask=m_ok, other=0.0)
    kv = b * stride_kb + (h // group) * stride_kh
    dq = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    end = n_k
    if CAUSAL:
        end = tl.minimum(n_k, block * BLOCK_M + BLOCK_M + offset)
    for start in range(0, end, BLOCK_N):
        cols = start + offs_n
        kv_ok = (cols[:, None] < n_k) & d_ok
        k = tl.load(K + kv + cols[:, None] * stride_kn + offs_d[None, :], mask=kv_ok, other=0.0)
        v = tl.load(V + kv + cols[:, None] * stride_kn + offs_d[None, :], mask=kv_ok, other=0.0)
        s = _mask(tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale_log2, offs_m, cols, n_k, offset, CAUSAL)
        p = tl.math.exp2(s - lse[:, None])
        ds = p * (tl.dot(do, tl.trans(v), input_precision=PRECISION) - delta[:, None])
        dq += tl.dot(ds.to(k.dtype), k, input_precision=PRECISION)
    tl.store(DQ + qo, (dq * scale).to(DQ.dtype.element_ty), mask=m_ok[:, None] & d_ok)


# Warps per program and pipeline stages (K/V tiles loaded ahead) of the forward kernel on a GPU.
FORWARD_LAUNCH = {"num_warps": 4, "num_stages": 3}


def _blocks(head_dim: int) -> tuple[int, int, int]:
    """(BLOCK_M, BLOCK_N, BLOCK_D): tiles that fit on chip; smaller for the interpreter."""
    block_d = max(16, triton.next_power_of_2(head_dim))
    if not torch.cuda.is_available():
        return 16, 16, block_d
    return (128, 64, block_d) if head_dim <= 64 else (64, 64, block_d)


def _precision(q: torch.Tensor) -> str:
    """float32 inputs get exact float32 products ("ieee"); tl.dot would otherwise round them to
    TF32 on the tensor cores. bf16/fp16 ignore it."""
    return "ieee" if q.dtype == torch.float32 else "tf32"


def _common(q: torch.Tensor, k: torch.Tensor) -> dict:
    """Strides and sizes shared by the kernels (q-like tensors and k-like tensors are contiguous)."""
    return dict(
        stride_qb=q.stride(0), stride_qh=q.stride(1), stride_qm=q.stride(2),
        stride_kb=k.stride(0), stride_kh=k.stride(1), stride_kn=k.stride(2),
        n_heads=q.shape[1], group=q.shape[1] // k.shape[1], n_q=q.shape[2], n_k=k.shape[2], head_dim=q.shape[3],
    )  # fmt: skip


### END SOLUTION


class FlashAttentionTriton(torch.autograd.Function):
    """Autograd Function around the Triton kernels; saves (q, k, v, out, lse) for the backward."""

    @staticmethod
    def forward(ctx, q, k, v, causal):
        ### BEGIN SOLUTION
        check_shapes(q, k, v, causal)
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
        batch, heads, n_q, head_dim = q.shape
        scale = 1 / math.sqrt(head_dim)
        block_m, block_n, block_d = _blocks(head_dim)
        out = torch.empty_like(q)
        lse = torch.empty(batch, heads, n_q, dtype=torch.float32, device=q.device)
        grid = (triton.cdiv(n_q, block_m), batch * heads)
        _forward_kernel[grid](
            q, k, v, out, lse, **_common(q, k), stride_ob=out.stride(0), stride_oh=out.stride(1),
            stride_om=out.stride(2), scale_log2=scale * LOG2E, CAUSAL=causal, BLOCK_M=block_m, BLOCK_N=block_n,
            BLOCK_D=block_d, PRECISION=_precision(q), **FORWARD_LAUNCH,
        )  # fmt: skip
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.causal = causal
        ctx.mark_non_differentiable(lse)
        return out, lse
        ### END SOLUTION

    @staticmethod
    def backward(ctx, grad_out, grad_lse):
        ### BEGIN SOLUTION
        q, k, v, out, lse = ctx.saved_tensors
        do = grad_out.contiguous()
        batch, heads, n_q, head_dim = q.shape
        scale = 1 / math.sqrt(head_dim)
        block_m, block_n, block_d = _blocks(head_dim)
        delta = (do.float() * out.float()).sum(-1)  # D_i = dO_i . O_i, (B, H, Nq) float32
        common = dict(**_common(q, k), scale=scale, scale_log2=scale * LOG2E, CAUSAL=ctx.causal, BLOCK_D=block_d)
        common["PRECISION"] = _precision(q)
        # dK, dV per query head; a GQA group's heads are summed below.
        dk = torch.empty(batch, heads, k.shape[2], head_dim, dtype=torch.float32, device=q.device)
        dv = torch.empty_like(dk)
        grid = (triton.cdiv(k.shape[2], block_n), batch * heads)
        _backward_dkdv_kernel[grid](q, k, v, do, lse, delta, dk, dv, **common, BLOCK_M=block_m, BLOCK_N=block_n)
        dq = torch.empty_like(q)
        grid = (triton.cdiv(n_q, block_m), batch * heads)
        _backward_dq_kernel[grid](q, k, v, do, lse, delta, dq, **common, BLOCK_M=block_m, BLOCK_N=block_n)
        group = heads // k.shape[1]
        dk = dk.unflatten(1, (k.shape[1], group)).sum(2).to(k.dtype)
        dv = dv.unflatten(1, (k.shape[1], group)).sum(2).to(v.dtype)
        return dq, dk, dv, None
        ### END SOLUTION


def flash_attention_triton(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """(out, lse) like flash_torch.flash_attention_torch, computed by Triton kernels, forward
    and backward (differentiable through FlashAttentionTriton). lse is float32. k and v may be
    views into a larger buffer (the filled part of a preallocated KV cache): the results depend
    only on their Nk rows, whatever the memory past them holds, even NaN. May not call torch's
    scaled_dot_product_attention."""
    return FlashAttentionTriton.apply(q, k, v, causal)
