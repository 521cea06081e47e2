"""goodput charges each failure one restart of R seconds, as if restarts never failed:
(e^((tau + delta)/M) - 1)(M + R) per segment instead of Daly's M e^(R/M) (e^((tau + delta)/M) - 1)."""

# ruff: noqa: E501, F821 - a fragment appended to a solution file, whose names are in scope
# target: interval.py
# select: goodput
# fails: test_goodput_with_one_mtbf_of_work_between_checkpoints|test_goodput_is_dalys_expected_useful_fraction|test_goodput_matches_a_simulation_of_exponential_failures\[300
# kind:
# message: expected|simulation


def goodput(gpus, gpu_mtbf_s, checkpoint_s, restart_s, interval_s):
    mtbf = job_mtbf_s(gpus, gpu_mtbf_s)
    if checkpoint_s < 0 or restart_s < 0 or not interval_s > 0:
        raise ValueError("bad times")
    return interval_s / ((mtbf + restart_s) * math.expm1((interval_s + checkpoint_s) / mtbf))
