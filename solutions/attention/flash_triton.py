"""FlashAttention-2 as Triton kernels (lecture 03-attention, section 5).

One program of the forward kernel owns BLOCK_M query rows of one (batch, head) and walks over
the keys BLOCK_N at a time with the online softmax, keeping its tiles in on-chip memory; it
writes out and lse once. The backward first computes delta = rowsum(dO * O) per query row, then
runs two kernels, as in FlashAttention-2: one program per block of keys accumulates dK and dV
(walking over queries), one program per block of queries accumulates dQ (walking over keys); both
recompute P = exp(S - lse).

Inputs are like reference.attention: q (B, H, Nq, d), k and v (B, Hkv, Nk, d), H a multiple of
Hkv (GQA), causal aligned to the end of the keys, any Nq and Nk, head_dim 16 to 128. Work in
float32 inside the kernels; out has q's dtype, lse is float32. On a machine without a GPU the
grader runs these kernels in the Triton interpreter (TRITON_INTERPRET=1), slowly: keep shapes
small there.
"""

from __future__ import annotations

import math
import os

import torch
import triton
import triton.language as tl
from reference import check_shapes

### BEGIN SOLUTION
# Notation (one head): S = Q K^T * scale, P = softmax(S) row by row, O = P V, lse_i = log sum_j e^S_ij.
# Query i sees key j when j <= i + offset, offset = Nk - Nq (causal aligned to the end of the keys).
#
# Base 2. exp(x) = 2^(x log2 e), and exp2 is the GPU's native instruction (exp costs an extra
# multiply per element). Each kernel multiplies the tile it keeps on chip for its whole life (Q in
# the forward and in dQ, K in dK/dV) by c = scale * log2(e) once, so the scores a tl.dot returns
# are already S2 = S * log2(e): no multiply per score in the loop. The row statistics m (running
# max) and lse are then in base 2 too; lse is stored in natural log (lse = lse2 / log2 e).
LOG2E = 1.4426950408889634  # (inside the kernels as a literal: a jit function reads no Python globals)

# The interpreter runs every program of every configuration on the CPU: one small configuration
# there. On a GPU, triton.autotune times a few candidates once per key (head dim, causal,
# sequence-length bucket; Triton adds the dtype of every tensor argument to the key) and keeps the
# fastest, but only for long sequences: each candidate is compiled first (seconds each), which a
# short problem (a decode step, a test) would never win back, so it runs the first candidate.
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
TUNE_FROM = 2048 * 2048  # Nq * Nk per head from which the candidates are timed


def _configs(candidates: list[tuple[int, int, int, int]]) -> list[triton.Config]:
    """(BLOCK_M, BLOCK_N, num_warps, num_stages) candidates as triton.Config; one 16 x 16 tile
    under the interpreter."""
    if INTERPRETED:
        candidates = [(16, 16, 1, 1)]
    return [
        triton.Config({"BLOCK_M": m, "BLOCK_N": n}, num_warps=warps, num_stages=stages)
        for m, n, warps, stages in candidates
    ]


def _tune_long_sequences(configs: list[triton.Config], named_args: dict, **kwargs) -> list[triton.Config]:
    """All the candidates for long sequences, the first alone (no timing) for short ones."""
    arguments = {**named_args, **kwargs}
    return configs if arguments["n_q"] * arguments["n_k"] >= TUNE_FROM else configs[:1]


# Candidates (the first is the default) from the shapes the fastest public Triton kernels settle on
# (Triton's fused-attention tutorial): wide query blocks and 64-128 keys per step forward; the
# backward's dK/dV kernel holds a wide key block and steps through narrow query blocks, the dQ
# kernel the other way round.
FORWARD_CONFIGS = [(128, 64, 4, 3), (128, 128, 8, 3), (64, 64, 4, 3)]
DKDV_CONFIGS = [(32, 128, 4, 3), (64, 128, 8, 3), (64, 64, 4, 3)]
DQ_CONFIGS = [(128, 32, 4, 3), (128, 64, 8, 3), (64, 64, 4, 3)]
TUNING = dict(key=["HEAD_DIM", "CAUSAL", "seq_bucket"], prune_configs_by={"early_config_prune": _tune_long_sequences})


@triton.jit
def _key_blocks(start_m, n_q, n_k, CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """For the query rows [start_m, start_m + BLOCK_M): (free_end, end). Key blocks [0, free_end)
    are seen whole by every row and every key in them exists: no mask. Blocks [free_end, end) need
    one: they cross the diagonal (causal) or the end of the keys. Keys from `end` on are seen by
    no row of the block and are never loaded (causal: the tiles above the diagonal are skipped)."""
    if CAUSAL:
        # Row start_m sees keys j <= start_m + offset; the last row, keys up to start_m + BLOCK_M - 1 + offset.
        offset = n_k - n_q
        free_end = (start_m + offset + 1) // BLOCK_N * BLOCK_N
        end = tl.minimum(n_k, start_m + BLOCK_M + offset)
    else:
        free_end = n_k // BLOCK_N * BLOCK_N
        end = n_k
    return free_end, end


@triton.jit
def _forward_steps(
    acc, denom, m, q, K, V, stride_kn, lo, hi, rows, n_q, n_k,
    MASKED: tl.constexpr, CAUSAL: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
    BLOCK_N: tl.constexpr, PRECISION: tl.constexpr,
):  # fmt: skip
    """The online softmax over key blocks [lo, hi): for each block, S2 = q K^T (q holds c), the
    new row max m' = max(m, rowmax S2), P = 2^(S2 - m'), and the running sums rescaled by
    alpha = 2^(m - m'): denom' = alpha denom + rowsum P, acc' = alpha acc + P V."""
    dims = tl.arange(0, BLOCK_D)
    for start in range(lo, hi, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        # Columns past head_dim read as zeros (HEAD_DIM is a compile-time constant: where it equals
        # BLOCK_D the compiler can drop that mask); keys past Nk too, where they can occur: never the
        # memory after the last key (the rest of a KV cache). Free blocks hold only real keys.
        tile = cols[:, None] * stride_kn + dims[None, :]
        loaded = dims[None, :] < HEAD_DIM
        if MASKED:
            loaded = loaded & (cols[:, None] < n_k)
        k = tl.load(K + tile, mask=loaded, other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION)
        if MASKED:  # only the blocks on the diagonal or at the end of the keys pay for the mask
            keep = cols[None, :] < n_k
            if CAUSAL:
                keep = keep & (cols[None, :] <= rows[:, None] + (n_k - n_q))
            s = tl.where(keep, s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, 1))
        p = tl.math.exp2(s - m_new[:, None])
        alpha = tl.math.exp2(m - m_new)
        denom = denom * alpha + tl.sum(p, 1)
        v = tl.load(V + tile, mask=loaded, other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
        m = m_new
    return acc, denom, m


@triton.autotune(configs=_configs(FORWARD_CONFIGS), **TUNING)
@triton.jit
def _forward_kernel(
    Q, K, V, OUT, LSE,
    stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn,
    n_heads, group, n_q, n_k, qk_scale, seq_bucket,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, CAUSAL: tl.constexpr, PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    """Program (i, b * H + h): out and lse of query rows [i * BLOCK_M, (i + 1) * BLOCK_M) of head h.
    out is laid out like q; lse is (B, H, Nq)."""
    start_m = tl.program_id(0) * BLOCK_M
    bh = tl.program_id(1)
    b, h = bh // n_heads, bh % n_heads
    q_head = b * stride_qb + h * stride_qh
    kv_head = b * stride_kb + (h // group) * stride_kh  # GQA: the group's key/value head, no copy
    rows = start_m + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, BLOCK_D)
    q_tile = rows[:, None] * stride_qm + dims[None, :]
    q_ok = (rows[:, None] < n_q) & (dims[None, :] < HEAD_DIM)
    q = tl.load(Q + q_head + q_tile, mask=q_ok, other=0.0)
    q = (q * qk_scale).to(q.dtype)  # c = scale * log2(e), folded once: q K^T is S2 = S log2(e)

    m = tl.full([BLOCK_M], float("-inf"), tl.float32)  # running row max of S2
    denom = tl.zeros([BLOCK_M], tl.float32)  # running sum_j 2^(S2_ij - m_i)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)  # running sum_j 2^(S2_ij - m_i) V_j
    free_end, end = _key_blocks(start_m, n_q, n_k, CAUSAL, BLOCK_M, BLOCK_N)
    # Two loops, as in the fastest Triton kernels: the blocks every row sees whole (most of them)
    # with no mask, then the few on the diagonal or at the end of the keys with one. Every row sees
    # key 0 (offset >= 0), so each row's max is finite after the first block: no 2^(-inf + inf).
    acc, denom, m = _forward_steps(
        acc, denom, m, q, K + kv_head, V + kv_head, stride_kn, 0, free_end, rows, n_q, n_k,
        False, CAUSAL, HEAD_DIM, BLOCK_D, BLOCK_N, PRECISION,
    )  # fmt: skip
    acc, denom, m = _forward_steps(
        acc, denom, m, q, K + kv_head, V + kv_head, stride_kn, free_end, end, rows, n_q, n_k,
        True, CAUSAL, HEAD_DIM, BLOCK_D, BLOCK_N, PRECISION,
    )  # fmt: skip
    tl.store(OUT + q_head + q_tile, (acc / denom[:, None]).to(OUT.dtype.element_ty), mask=q_ok)
    # lse2 = m + log2(denom) = log2 sum_j 2^S2_ij; natural log: lse = lse2 * ln 2.
    tl.store(LSE + bh * n_q + rows, (m + tl.math.log2(denom)) * 0.6931471805599453, mask=rows < n_q)


@triton.jit
def _backward_preprocess_kernel(
    OUT, DO, DELTA, stride_ob, stride_oh, stride_om, n_heads, n_q,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr,
):  # fmt: skip
    """delta_i = sum_d dO_id O_id = rowsum(dO * O), (B, H, Nq) float32. It equals sum_j P_ij dP_ij,
    the term the softmax's backward subtracts: dS = P * (dP - delta), with dP = dO V^T."""
    bh = tl.program_id(1)
    head = (bh // n_heads) * stride_ob + (bh % n_heads) * stride_oh
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, BLOCK_D)
    tile = head + rows[:, None] * stride_om + dims[None, :]
    ok = (rows[:, None] < n_q) & (dims[None, :] < HEAD_DIM)
    o = tl.load(OUT + tile, mask=ok, other=0.0).to(tl.float32)
    do = tl.load(DO + tile, mask=ok, other=0.0).to(tl.float32)
    tl.store(DELTA + bh * n_q + rows, tl.sum(o * do, 1), mask=rows < n_q)


@triton.jit
def _dkdv_steps(
    dk, dv, k, v, Q, DO, LSE, DELTA, stride_qm, lo, hi, keys, n_q, n_k,
    MASKED: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr,
    PRECISION: tl.constexpr,
):  # fmt: skip
    """dK and dV of one key block over query blocks [lo, hi), transposed so that the key block
    stays the left operand: S2^T = k Q^T (k holds c), P^T = 2^(S2^T - lse2), dV += P^T dO,
    dP^T = V dO^T, dS^T = P^T * (dP^T - delta), dK += dS^T Q (times scale, at the end).

    Rows past Nq load as zeros with lse2 = delta = 0: P^T = 1 there, but dO = 0 and Q = 0, so they
    add nothing: only the causal mask is needed, on the diagonal blocks."""
    dims = tl.arange(0, BLOCK_D)
    for start in range(lo, hi, BLOCK_M):
        rows = start + tl.arange(0, BLOCK_M)
        tile = rows[:, None] * stride_qm + dims[None, :]
        ok = (rows[:, None] < n_q) & (dims[None, :] < HEAD_DIM)
        q = tl.load(Q + tile, mask=ok, other=0.0)
        do = tl.load(DO + tile, mask=ok, other=0.0)
        lse2 = tl.load(LSE + rows, mask=rows < n_q, other=0.0) * 1.4426950408889634
        delta = tl.load(DELTA + rows, mask=rows < n_q, other=0.0)
        pt = tl.math.exp2(tl.dot(k, tl.trans(q), input_precision=PRECISION) - lse2[None, :])
        if MASKED:
            pt = tl.where(keys[:, None] <= rows[None, :] + (n_k - n_q), pt, 0.0)
        dv += tl.dot(pt.to(do.dtype), do, input_precision=PRECISION)
        dpt = tl.dot(v, tl.trans(do), input_precision=PRECISION)
        dst = pt * (dpt - delta[None, :])
        dk += tl.dot(dst.to(q.dtype), q, input_precision=PRECISION)
    return dk, dv


@triton.autotune(configs=_configs(DKDV_CONFIGS), **TUNING)
@triton.jit
def _backward_dkdv_kernel(
    Q, K, V, DO, LSE, DELTA, DK, DV,
    stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn,
    n_heads, group, n_q, n_k, qk_scale, scale, seq_bucket,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, CAUSAL: tl.constexpr, PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    """Program (j, b * Hkv + g): dK and dV of keys [j * BLOCK_N, (j + 1) * BLOCK_N) of key/value
    head g, summed over the `group` query heads that share it (GQA): each block has one writer, so
    no atomics, and dK, dV are written once, in k's dtype (laid out like k)."""
    start_n = tl.program_id(0) * BLOCK_N
    bg = tl.program_id(1)
    kv_heads = n_heads // group
    b, g = bg // kv_heads, bg % kv_heads
    kv_head = b * stride_kb + g * stride_kh
    keys = start_n + tl.arange(0, BLOCK_N)
    dims = tl.arange(0, BLOCK_D)
    kv_tile = kv_head + keys[:, None] * stride_kn + dims[None, :]
    # Keys past Nk load as zeros (and are not stored): they add nothing to the other keys' sums.
    kv_ok = (keys[:, None] < n_k) & (dims[None, :] < HEAD_DIM)
    k = tl.load(K + kv_tile, mask=kv_ok, other=0.0)
    v = tl.load(V + kv_tile, mask=kv_ok, other=0.0)
    k = (k * qk_scale).to(k.dtype)  # c folded into the tile this program keeps: k Q^T is S2^T
    dk = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)

    # Causal: query rows i >= start_n - offset see some of these keys, rows from
    # start_n + BLOCK_N - 1 - offset on see all of them. In whole query blocks: [lo, free_from)
    # cross the diagonal (masked), [free_from, Nq) are free; the rows before lo are never read.
    lo, free_from = 0, 0
    if CAUSAL:
        offset = n_k - n_q
        lo = tl.maximum(start_n - offset, 0) // BLOCK_M * BLOCK_M
        free_from = tl.minimum(tl.cdiv(tl.maximum(start_n + BLOCK_N - 1 - offset, 0), BLOCK_M) * BLOCK_M, n_q)
    for member in range(group):
        h = g * group + member  # GQA: the query heads of key/value head g are g * group, ...
        q_head = b * stride_qb + h * stride_qh  # q and dO: same shape, same layout
        lse, delta = LSE + (b * n_heads + h) * n_q, DELTA + (b * n_heads + h) * n_q
        dk, dv = _dkdv_steps(
            dk, dv, k, v, Q + q_head, DO + q_head, lse, delta, stride_qm, lo, free_from, keys, n_q, n_k,
            True, HEAD_DIM, BLOCK_D, BLOCK_M, PRECISION,
        )  # fmt: skip
        dk, dv = _dkdv_steps(
            dk, dv, k, v, Q + q_head, DO + q_head, lse, delta, stride_qm, free_from, n_q, keys, n_q, n_k,
            False, HEAD_DIM, BLOCK_D, BLOCK_M, PRECISION,
        )  # fmt: skip
    tl.store(DK + kv_tile, (dk * scale).to(DK.dtype.element_ty), mask=kv_ok)
    tl.store(DV + kv_tile, dv.to(DV.dtype.element_ty), mask=kv_ok)


@triton.jit
def _dq_steps(
    dq, q, do, lse2, delta, K, V, stride_kn, lo, hi, rows, n_q, n_k,
    MASKED: tl.constexpr, CAUSAL: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
    BLOCK_N: tl.constexpr, PRECISION: tl.constexpr,
):  # fmt: skip
    """dQ of one query block over key blocks [lo, hi): S2 = q K^T (q holds c), P = 2^(S2 - lse2),
    dP = dO V^T, dS = P * (dP - delta), dQ += dS K (times scale, at the end)."""
    dims = tl.arange(0, BLOCK_D)
    for start in range(lo, hi, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        tile = cols[:, None] * stride_kn + dims[None, :]
        loaded = dims[None, :] < HEAD_DIM
        if MASKED:  # as in the forward: keys past Nk only in the masked blocks
            loaded = loaded & (cols[:, None] < n_k)
        k = tl.load(K + tile, mask=loaded, other=0.0)
        v = tl.load(V + tile, mask=loaded, other=0.0)
        p = tl.math.exp2(tl.dot(q, tl.trans(k), input_precision=PRECISION) - lse2[:, None])
        if MASKED:
            keep = cols[None, :] < n_k
            if CAUSAL:
                keep = keep & (cols[None, :] <= rows[:, None] + (n_k - n_q))
            p = tl.where(keep, p, 0.0)
        ds = p * (tl.dot(do, tl.trans(v), input_precision=PRECISION) - delta[:, None])
        dq += tl.dot(ds.to(k.dtype), k, input_precision=PRECISION)
    return dq


@triton.autotune(configs=_configs(DQ_CONFIGS), **TUNING)
@triton.jit
def _backward_dq_kernel(
    Q, K, V, DO, LSE, DELTA, DQ,
    stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn,
    n_heads, group, n_q, n_k, qk_scale, scale, seq_bucket,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, CAUSAL: tl.constexpr, PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    """Program (i, b * H + h): dQ of query rows [i * BLOCK_M, (i + 1) * BLOCK_M) of head h, over
    the same key blocks as the forward (free ones, then masked ones), written once in q's dtype."""
    start_m = tl.program_id(0) * BLOCK_M
    bh = tl.program_id(1)
    b, h = bh // n_heads, bh % n_heads
    q_head = b * stride_qb + h * stride_qh
    kv_head = b * stride_kb + (h // group) * stride_kh
    rows = start_m + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, BLOCK_D)
    q_tile = q_head + rows[:, None] * stride_qm + dims[None, :]
    q_ok = (rows[:, None] < n_q) & (dims[None, :] < HEAD_DIM)
    q = tl.load(Q + q_tile, mask=q_ok, other=0.0)
    q = (q * qk_scale).to(q.dtype)
    do = tl.load(DO + q_tile, mask=q_ok, other=0.0)
    lse2 = tl.load(LSE + bh * n_q + rows, mask=rows < n_q, other=0.0) * 1.4426950408889634
    delta = tl.load(DELTA + bh * n_q + rows, mask=rows < n_q, other=0.0)
    dq = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    free_end, end = _key_blocks(start_m, n_q, n_k, CAUSAL, BLOCK_M, BLOCK_N)
    dq = _dq_steps(
        dq, q, do, lse2, delta, K + kv_head, V + kv_head, stride_kn, 0, free_end, rows, n_q, n_k,
        False, CAUSAL, HEAD_DIM, BLOCK_D, BLOCK_N, PRECISION,
    )  # fmt: skip
    dq = _dq_steps(
        dq, q, do, lse2, delta, K + kv_head, V + kv_head, stride_kn, free_end, end, rows, n_q, n_k,
        True, CAUSAL, HEAD_DIM, BLOCK_D, BLOCK_N, PRECISION,
    )  # fmt: skip
    tl.store(DQ + q_tile, (dq * scale).to(DQ.dtype.element_ty), mask=q_ok)


# Rows per program of the preprocess kernel (not tuned: it reads dO and O once, a small cost).
PREPROCESS_BLOCK_M = 16 if INTERPRETED else 128


def _precision(q: torch.Tensor) -> str:
    """float32 inputs get exact float32 products ("ieee"); tl.dot would otherwise round them to
    TF32 on the tensor cores. bf16/fp16 ignore it."""
    return "ieee" if q.dtype == torch.float32 else "tf32"


def _common(q: torch.Tensor, k: torch.Tensor) -> dict:
    """Arguments every kernel shares (q-like and k-like tensors are contiguous, so stride 1 along d)."""
    head_dim = q.shape[3]
    return dict(
        stride_qb=q.stride(0), stride_qh=q.stride(1), stride_qm=q.stride(2),
        stride_kb=k.stride(0), stride_kh=k.stride(1), stride_kn=k.stride(2),
        n_heads=q.shape[1], group=q.shape[1] // k.shape[1], n_q=q.shape[2], n_k=k.shape[2],
        qk_scale=LOG2E / math.sqrt(head_dim),
        # Tuning key: the best tiles for a decode step (Nq of a few rows) and for 16K tokens differ.
        seq_bucket=triton.next_power_of_2(max(q.shape[2], k.shape[2])),
        HEAD_DIM=head_dim, BLOCK_D=max(16, triton.next_power_of_2(head_dim)), PRECISION=_precision(q),
    )  # fmt: skip


### END SOLUTION


class FlashAttentionTriton(torch.autograd.Function):
    """Autograd Function around the Triton kernels; saves (q, k, v, out, lse) for the backward."""

    @staticmethod
    def forward(ctx, q, k, v, causal):
        ### BEGIN SOLUTION
        check_shapes(q, k, v, causal)
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
        batch, heads, n_q, _ = q.shape
        out = torch.empty_like(q)
        lse = torch.empty(batch, heads, n_q, dtype=torch.float32, device=q.device)
        # The grid depends on the tile the autotuner picks, hence a function of the configuration.
        grid = lambda config: (triton.cdiv(n_q, config["BLOCK_M"]), batch * heads)  # noqa: E731
        _forward_kernel[grid](q, k, v, out, lse, **_common(q, k), CAUSAL=causal)
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
        common = dict(**_common(q, k), scale=1 / math.sqrt(head_dim), CAUSAL=ctx.causal)
        # 1. delta = rowsum(dO * O), once per row, before the two kernels that both need it.
        delta = torch.empty_like(lse)
        _backward_preprocess_kernel[(triton.cdiv(n_q, PREPROCESS_BLOCK_M), batch * heads)](
            out, do, delta, out.stride(0), out.stride(1), out.stride(2), heads, n_q,
            HEAD_DIM=head_dim, BLOCK_D=common["BLOCK_D"], BLOCK_M=PREPROCESS_BLOCK_M,
        )  # fmt: skip
        # 2. dK, dV: one program per key block of each key/value head (its GQA group summed inside).
        dk, dv = torch.empty_like(k), torch.empty_like(v)
        grid = lambda config: (triton.cdiv(k.shape[2], config["BLOCK_N"]), batch * k.shape[1])  # noqa: E731
        _backward_dkdv_kernel[grid](q, k, v, do, lse, delta, dk, dv, **common)
        # 3. dQ: one program per query block.
        dq = torch.empty_like(q)
        grid = lambda config: (triton.cdiv(n_q, config["BLOCK_M"]), batch * heads)  # noqa: E731
        _backward_dq_kernel[grid](q, k, v, do, lse, delta, dq, **common)
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
