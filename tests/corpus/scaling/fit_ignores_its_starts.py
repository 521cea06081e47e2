"""fit_scaling_law runs from the best 4 grid points whatever `starts` says: wrong for starts=1 only."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: fit.py
# select: fit_runs_from_exactly_the_starts_best
# fails: fit_runs_from_exactly_the_starts_best
# kind:
# message: starts=1\) ends at objective

_fit_with_starts = fit_scaling_law


def fit_scaling_law(N, D, loss, starts=4):
    return _fit_with_starts(N, D, loss, starts=max(starts, 4))
