"""The ring finds its neighbours as global rank -+ world_size // p, as if every group's members were evenly strided over the world: right in the groups {1, 3} and {0, 2} of a world of 4, but in the groups {0, 2, 3} and {1, 4} of a world of 5 it sends to ranks outside its group."""

# ruff: noqa: E501, F821 - a fragment appended to a solution file, whose names are in scope
# target: ring.py
# select: world_of_4 or world_of_5
# fails: groups_of_3_and_2_of_a_world_of_5
# kind: exception
# message: in step 1 of 3 \(ring_allreduce\): (every rank|rank \d):(.|\n)*_send_right_receive_left(.|\n)*is not part of group


def _strided_neighbours(group):
    rank, p = dist.get_rank(group), dist.get_world_size(group)
    me, world = dist.get_rank(), dist.get_world_size()
    stride = world // p  # the bug: the group's members are not always me -+ stride
    return rank, p, (me - stride) % world, (me + stride) % world


def _reduce_scatter_chunks(chunks, group):
    rank, p, left, right = _strided_neighbours(group)
    incoming = torch.empty_like(max(chunks, key=torch.Tensor.numel))
    for step in range(p - 1):
        send_index, receive_index = (rank - step - 1) % p, (rank - step - 2) % p
        received = incoming[: chunks[receive_index].numel()]
        _send_right_receive_left(chunks[send_index], received, right, left, group)
        chunks[receive_index] += received


def _all_gather_chunks(chunks, group):
    rank, p, left, right = _strided_neighbours(group)
    for step in range(p - 1):
        send_index, receive_index = (rank - step) % p, (rank - step - 1) % p
        _send_right_receive_left(chunks[send_index], chunks[receive_index], right, left, group)
