"""flash_attention_torch's backward masks the tiles above the diagonal instead of skipping them
(the forward skips them): right gradients, but a causal backward does the work of a full one."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: flash_torch.py
# select: skips_the_tiles or flash_attention_torch_gradients and causal and float64
# fails: skips_the_tiles
# kind:
# message: in the backward


def _flash_backward(q, k, v, out, lse, grad_out, causal, scale, block_q, block_k):
    group = q.shape[1] // k.shape[1]
    compute = lse.dtype
    q5, k5, v5 = _split_heads(q.to(compute), k.to(compute), v.to(compute), group)
    do5 = grad_out.to(compute).unflatten(1, (k.shape[1], group))
    lse5 = lse.unflatten(1, (k.shape[1], group))
    d5 = (do5 * out.to(compute).unflatten(1, (k.shape[1], group))).sum(dim=-1)
    dq, dk, dv = torch.zeros_like(q5), torch.zeros_like(k5), torch.zeros_like(v5)
    nq, nk = q.shape[2], k.shape[2]
    for rows in _blocks(nq, block_q):
        r = slice(*rows)
        for cols in _blocks(nk, block_k):  # every tile: the mask alone zeroes those above the diagonal
            c = slice(*cols)
            s = _tile_scores(q5[..., r, :], k5[..., c, :], scale, rows, cols, nk - nq, causal)
            p = torch.exp(s - lse5[..., r, None])
            dv[..., c, :] += (p.transpose(-2, -1) @ do5[..., r, :]).sum(dim=2, keepdim=True)
            ds = p * (do5[..., r, :] @ v5[..., c, :].transpose(-2, -1) - d5[..., r, None])
            dq[..., r, :] += (ds @ k5[..., c, :]) * scale
            dk[..., c, :] += (ds.transpose(-2, -1) @ q5[..., r, :]).sum(dim=2, keepdim=True) * scale
    return dq.flatten(1, 2).to(q.dtype), dk.squeeze(2).to(k.dtype), dv.squeeze(2).to(v.dtype)
