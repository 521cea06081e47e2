"""The f and g operators all-reduce over the whole world instead of `group`: right on a world that
is one tensor-parallel group, but two groups of a world of 4 sum each other's data."""

# ruff: noqa: E501, F821 - a fragment appended to a solution file, whose names are in scope
# target: comm.py
# select: within_two_groups
# fails: region_operators_within_two_groups|block_within_two_groups_matches_one_process\[groups=2x2-tp|block_within_two_groups_sends_no_more_than_the_library\[groups=2x2-tp|vocab_embedding_and_loss_within_two_groups
# kind:
# message: instance on ranks \{\d, \d\} \(Group\(\(\d, \d\)\)\)


def _all_reduce(x, group):
    out = x.clone(memory_format=torch.contiguous_format)
    dist.all_reduce(out)  # the bug: the default group, every rank of the world
    return out
