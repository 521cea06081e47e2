"""alert_rules' straggler rule compares a GPU with 0.4 times its job's median instead of
straggler_ratio times it: a GPU at 0.43 of the median (below the default 0.5) raises no alert."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: monitoring.py
# select: straggler_alert_compares or alert_rules_follow_their_arguments
# fails: test_straggler_alert_compares_each_gpu_with_its_jobs_median|test_alert_rules_follow_their_arguments
# kind:
# message: alertname: GpuStragglerInJob
# needs: promtool

_alert_rules_as_given = alert_rules


def alert_rules(straggler_ratio=0.5, for_duration="5m"):
    text = _alert_rules_as_given(straggler_ratio, for_duration)
    return text.replace(f"({straggler_ratio!r} * quantile", "(0.4 * quantile")
