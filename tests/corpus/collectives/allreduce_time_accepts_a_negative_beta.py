"""allreduce_time checks nbytes and alpha but not beta: a negative bandwidth cost is accepted."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: cost_model.py
# select: allreduce_time_rejects
# fails: negative-beta
# kind:
# message: expected ValueError

_checked = allreduce_time


def allreduce_time(algorithm, world_size, nbytes, alpha, beta):
    if isinstance(beta, (int, float)) and beta < 0:
        return _checked(algorithm, world_size, nbytes, alpha, 0.0) + 2 * nbytes * beta  # the bug
    return _checked(algorithm, world_size, nbytes, alpha, beta)
