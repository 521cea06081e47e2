"""bus_bandwidth applies (n-1)/n to an all-reduce too, as to an all-gather: half of nccl-tests' busbw."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: cost.py
# select: bus_bandwidth
# fails: test_bus_bandwidth|test_predicted_bus_bandwidth
# kind:
# message: expected


def bus_bandwidth(op, nbytes, seconds, n):
    if op not in BUS_FACTORS or not seconds > 0 or nbytes < 0 or not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"bad arguments {(op, nbytes, seconds, n)}")
    algbw = nbytes / seconds / 1e9
    return algbw, algbw * (n - 1) / n
