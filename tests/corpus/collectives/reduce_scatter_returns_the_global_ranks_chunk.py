"""ring_reduce_scatter reduces in the group but returns chunk dist.get_rank(), the GLOBAL rank, not the group rank: in the groups {1, 3} and {0, 2} of a world of 4, rank 1 returns the other rank's chunk and ranks 2 and 3 a chunk that does not exist."""

# ruff: noqa: E501, F821 - a fragment appended to a solution file, whose names are in scope
# target: ring.py
# select: ring_collectives_in
# fails: ring_collectives_in(?!side)|ring_collectives_inside_two_subgroups_of_a_world_of_4_combine_only_their_members\[ring_reduce_scatter\]
# kind: exception
# message: in step 2 of 3 \(ring_reduce_scatter\): rank [23]:(.|\n)*return chunks\[dist\.get_rank\(\)\](.|\n)*IndexError: list index out of range


def ring_reduce_scatter(tensor, group=None):
    _, p, _, _ = ring_neighbours(group)
    chunks = [chunk.clone() for chunk in tensor.flatten().tensor_split(p)]
    _reduce_scatter_chunks(chunks, group)
    return chunks[dist.get_rank()]
