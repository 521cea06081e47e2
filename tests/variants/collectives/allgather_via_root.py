"""ring_allgather through rank 0: every rank sends its shard to rank 0, which concatenates and
sends the whole result to every other rank. Correct, but rank 0 sends (p-1) * N bytes."""

# target: ring.py


def ring_allgather(shard, group=None):
    rank, p, _, _ = ring_neighbours(group)
    lengths = torch.zeros(p, dtype=torch.int64)
    lengths[rank] = shard.numel()
    if rank == 0:
        for source in range(1, p):
            dist.recv(lengths[source : source + 1], source, group)
        for destination in range(1, p):
            dist.send(lengths, destination, group)
    else:
        dist.send(lengths[rank : rank + 1], 0, group)
        dist.recv(lengths, 0, group)
    gathered = torch.empty(int(lengths.sum()), dtype=shard.dtype)
    pieces = list(gathered.split(lengths.tolist()))
    pieces[rank].copy_(shard.flatten())
    if rank == 0:
        for source in range(1, p):
            if pieces[source].numel():
                dist.recv(pieces[source], source, group)
        for destination in range(1, p):
            dist.send(gathered, destination, group)
    else:
        if pieces[rank].numel():
            dist.send(pieces[rank], 0, group)
        dist.recv(gathered, 0, group)
    return gathered
