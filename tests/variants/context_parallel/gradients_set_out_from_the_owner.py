"""A ring whose block gradients set out from the block's owner with the block (the owner's own
share first) and make p hops back to it, instead of starting at the first rank the block reaches
and making p-1: the gradients are right, but every rank sends one dK/dV block more than
cp_comm_bytes' backward."""
# target: ring.py


def _backward_with_one_hop_too_many(ctx, grad_out):
    q, k, v, out, lse = ctx.saved_tensors
    ring = ctx.ring
    grad_out = grad_out.contiguous()
    delta = (grad_out * out).sum(-1)
    grad_q = torch.zeros_like(q)
    block = torch.stack([k, v])
    travelling = None  # dK, dV of the block I hold, from the ranks it has visited, my share included
    pending: list = []
    for step in range(ring.p):
        source = (ring.rank - step) % ring.p
        requests, incoming = [], None
        if step < ring.p - 1:
            incoming = torch.empty_like(block)
            requests = ring.exchange(block, incoming)
        grads = torch.zeros_like(block)
        plan = ring.plan(source)
        if plan is not None:
            rows, cols, masked = plan
            positions = (ring.positions[ring.rank][rows], ring.positions[source][cols]) if masked else None
            dq, dk, dv = _block_backward(
                q[:, :, rows], block[0][:, :, cols], block[1][:, :, cols],
                grad_out[:, :, rows], lse[:, :, rows], delta[:, :, rows], positions,
            )  # fmt: skip
            grad_q[:, :, rows] += dq
            grads[0][:, :, cols] += dk
            grads[1][:, :, cols] += dv
        for request in pending:
            request.wait()
        travelling = grads if step == 0 else travelling + grads
        if ring.p > 1:  # every step sends, the first one too: p hops
            received = torch.empty_like(block)
            pending = ring.exchange(travelling, received, tag=1)
            travelling = received
        for request in requests:
            request.wait()
        if incoming is not None:
            block = incoming
    for request in pending:
        request.wait()
    return grad_q, travelling[0], travelling[1], None, None, None


_RingAttention.backward = staticmethod(_backward_with_one_hop_too_many)
