"""A correct allreduce that wastes bandwidth: every rank sends its tensor to rank 0, which sums
and sends the result back. Rank 0 sends (p-1) * N bytes, far over the 2(p-1)/p * N bound."""
# target: ring.py


def ring_allreduce(tensor, group=None):
    rank, p, _, _ = ring_neighbours(group)
    work = tensor.contiguous().view(-1)
    if rank == 0:
        incoming = torch.empty_like(work)
        for source in range(1, p):
            dist.recv(incoming, source, group)
            work += incoming
        for destination in range(1, p):
            dist.send(work, destination, group)
    else:
        dist.send(work, 0, group)
        dist.recv(work, 0, group)
    tensor.copy_(work.view_as(tensor))
    return tensor
