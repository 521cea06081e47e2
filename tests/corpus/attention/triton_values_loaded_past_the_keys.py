"""flash_attention_triton's forward loads each V tile masked on head_dim only ("the padding keys'
probabilities are 0 anyway"): in the masked loop over the last key block it reads the rows past
Nk, and 0 * NaN there turns the output NaN when k and v are the filled part of a cache."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: flash_triton.py
# select: ignores_the_cache
# fails: ignores_the_cache
# kind:
# message: got nan


@triton.jit
def _forward_steps(
    acc, denom, m, q, K, V, stride_kn, lo, hi, rows, n_q, n_k,
    MASKED: tl.constexpr, CAUSAL: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
    BLOCK_N: tl.constexpr, PRECISION: tl.constexpr,
):  # fmt: skip
    dims = tl.arange(0, BLOCK_D)
    for start in range(lo, hi, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        tile = cols[:, None] * stride_kn + dims[None, :]
        loaded = dims[None, :] < HEAD_DIM
        if MASKED:
            loaded = loaded & (cols[:, None] < n_k)
        k = tl.load(K + tile, mask=loaded, other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION)
        if MASKED:
            keep = cols[None, :] < n_k
            if CAUSAL:
                keep = keep & (cols[None, :] <= rows[:, None] + (n_k - n_q))
            s = tl.where(keep, s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, 1))
        p = tl.math.exp2(s - m_new[:, None])
        alpha = tl.math.exp2(m - m_new)
        denom = denom * alpha + tl.sum(p, 1)
        v = tl.load(V + tile, mask=dims[None, :] < HEAD_DIM, other=0.0)  # rows past n_k read too
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
        m = m_new
    return acc, denom, m
