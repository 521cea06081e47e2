"""allreduce_time drops the fold of the extra ranks (2 * (alpha + n * beta)) when p is not a power
of two: right at every world size of the defaults, wrong at p = 3, 5, 6, 7."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: cost_model.py
# select: allreduce_time_matches_hand_computed
# fails: matches_hand_computed\[(recursive_doubling-p[56]|rabenseifner-p6)\]
# kind:
# message: returned

_with_the_fold = allreduce_time


def allreduce_time(algorithm, world_size, nbytes, alpha, beta):
    if algorithm == "ring" or not isinstance(world_size, int) or world_size < 1:
        return _with_the_fold(algorithm, world_size, nbytes, alpha, beta)
    p2 = 1 << (world_size.bit_length() - 1)
    return _with_the_fold(algorithm, p2, nbytes, alpha, beta)  # the bug: as if only p2 ranks took part
