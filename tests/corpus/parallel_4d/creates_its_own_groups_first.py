"""build_groups creates the rank's own group of each kind first: ranks call new_group in different orders and hang."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: grid.py
# select: test_one_step_on_a_world_of_8_equals_one_process and dp2-tp2-pp2-cp1
# fails: test_one_step_on_a_world_of_8_equals_one_process
# kind: deadlock
# message: new_group


def build_groups(grid, rank):
    mine = {}
    for kind in GROUP_KINDS:
        for ranks in sorted(grid.groups[kind], key=lambda members: rank not in members):
            group = dist.new_group(ranks)
            if rank in ranks:
                mine[kind] = group
    return mine
