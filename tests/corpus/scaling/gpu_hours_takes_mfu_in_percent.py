"""gpu_hours accepts an MFU above 1 (40 meaning 40 %) instead of raising ValueError."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: memory.py
# select: bad_run_arguments
# fails: bad_run_arguments
# kind:
# message: returned normally: gpu_hours\(.*40\.0\)


def gpu_hours(total_flops, peak_flops, mfu):
    if mfu > 1:
        mfu = mfu / 100
    _check_run(total_flops, 1, peak_flops, mfu)
    return total_flops / (peak_flops * mfu) / 3600
