"""Daly's interval without its final "- delta": the time between the starts of two checkpoints,
not the compute between them."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: interval.py
# select: optimal_interval or daly
# fails: test_optimal_interval_is_the_papers_closed_form\[daly\]|test_daly_is_the_default
# kind:
# message: expected


def optimal_checkpoint_interval(checkpoint_s, mtbf_s, method="daly"):
    if method not in ("young", "daly") or checkpoint_s < 0 or not mtbf_s > 0:
        raise ValueError("bad input")
    young = math.sqrt(2 * checkpoint_s * mtbf_s)
    if method == "young":
        return young
    if checkpoint_s >= 2 * mtbf_s:
        return mtbf_s
    x = checkpoint_s / (2 * mtbf_s)
    return young * (1 + math.sqrt(x) / 3 + x / 9)
