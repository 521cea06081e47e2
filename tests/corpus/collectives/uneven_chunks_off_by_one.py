"""ring_reduce_scatter gives the remainder to the last rank (floor-sized chunks): right only when the world size divides the size."""

# ruff: noqa: E501, F821 - a fragment appended to a solution file, whose names are in scope
# target: ring.py
# select: ring_reduce_scatter_matches and (3-divisible-float32 or 3-not-divisible-float64)
# fails: not-divisible
# kind:
# message: rank \d: chunk \d of the sum vs dist\.reduce_scatter_tensor: shape


def ring_reduce_scatter(tensor, group=None):
    rank, p, _, _ = ring_neighbours(group)
    flat = tensor.flatten()
    size = flat.numel() // p
    bounds = [r * size for r in range(p)] + [flat.numel()]
    chunks = [flat[bounds[r] : bounds[r + 1]].clone() for r in range(p)]
    _reduce_scatter_chunks(chunks, group)
    return chunks[rank]
