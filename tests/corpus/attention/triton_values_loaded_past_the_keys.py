"""flash_attention_triton's forward loads each V tile masked on head_dim only ("the padding keys'
probabilities are 0 anyway"): it reads the rows past Nk, and 0 * NaN there turns the output NaN
when k and v are the filled part of a cache."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: flash_triton.py
# select: ignores_the_cache
# fails: ignores_the_cache
# kind:
# message: got nan


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
    offset = n_k - n_q
    offs_m = block * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d[None, :] < head_dim
    q_ptrs = Q + b * stride_qb + h * stride_qh + offs_m[:, None] * stride_qm + offs_d[None, :]
    q = tl.load(q_ptrs, mask=(offs_m[:, None] < n_q) & d_ok, other=0.0)
    kv = b * stride_kb + (h // group) * stride_kh
    k_ptrs = K + kv + offs_n[:, None] * stride_kn + offs_d[None, :]
    v_ptrs = V + kv + offs_n[:, None] * stride_kn + offs_d[None, :]
    m = tl.full([BLOCK_M], float("-inf"), tl.float32)
    denom = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    end = n_k
    if CAUSAL:
        end = tl.minimum(n_k, block * BLOCK_M + BLOCK_M + offset)
    for start in range(0, end, BLOCK_N):
        cols = start + offs_n
        k = tl.load(k_ptrs + start * stride_kn, mask=(cols[:, None] < n_k) & d_ok, other=0.0)
        s = _mask(tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale_log2, offs_m, cols, n_k, offset, CAUSAL)
        m_new = tl.maximum(m, tl.max(s, 1))
        p = tl.math.exp2(s - m_new[:, None])
        correction = tl.math.exp2(m - m_new)
        denom = denom * correction + tl.sum(p, 1)
        v = tl.load(v_ptrs + start * stride_kn, mask=d_ok, other=0.0)  # rows past n_k read too
        acc = acc * correction[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
        m = m_new
    out = acc / denom[:, None]
    o_ptrs = OUT + b * stride_ob + h * stride_oh + offs_m[:, None] * stride_om + offs_d[None, :]
    tl.store(o_ptrs, out.to(OUT.dtype.element_ty), mask=(offs_m[:, None] < n_q) & d_ok)
    lse = (m + tl.math.log2(denom)) / 1.4426950408889634
    tl.store(LSE + bh * n_q + offs_m, lse, mask=offs_m < n_q)
