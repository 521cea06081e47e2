"""compute_optimal that refuses C <= 1 instead of C <= 0: every real budget is far above 1 FLOP, but the docstring accepts any C > 0, and half a FLOP is refused."""

# ruff: noqa: E501, F821 - a fragment appended to a solution file, whose names are in scope
# target: fit.py
# select: edge_of_their_domain
# fails: test_fit_and_compute_optimal_take_every_input_at_the_edge_of_their_domain
# kind: exception
# message: ValueError


_closed_form_optimal = compute_optimal


def compute_optimal(C, fit):
    if not C > 1:
        raise ValueError(f"C must be above 1, not {C!r}")
    return _closed_form_optimal(C, fit)
