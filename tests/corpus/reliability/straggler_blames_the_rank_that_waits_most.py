"""straggler names the rank that waits longest in collectives: the victim, not the culprit."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: slow.py
# select: straggler and (computes_longest or least_wait)
# fails: test_the_rank_that_computes_longest|test_the_straggler_is_the_longest_compute
# kind:
# message: expected


def straggler(step_times, wait_times, threshold=1.2):
    if not step_times or not step_times[0] or threshold < 1:
        raise ValueError("bad input")
    typical = [statistics.median(waits) for waits in wait_times]
    slowest = max(range(len(typical)), key=lambda rank: (typical[rank], -rank))
    others = typical[:slowest] + typical[slowest + 1 :]
    if not others or typical[slowest] <= threshold * statistics.median(others):
        return None
    return slowest
