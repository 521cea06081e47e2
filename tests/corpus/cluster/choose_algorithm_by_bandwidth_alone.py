"""choose_algorithm compares bandwidth terms only (no alpha): never halving-doubling for small messages."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: cost.py
# select: choose_algorithm
# fails: test_choose_algorithm_matches_the_simulators_fastest|test_choose_algorithm_picks_halving_doubling_for_small
# kind:
# message: choices off the simulator|expected recursive_halving_doubling

import dataclasses as _dataclasses

_reference_choose = choose_algorithm


def choose_algorithm(op, nbytes, cluster):
    free = _dataclasses.replace(cluster, nvlink_latency_s=0.0, nic_latency_s=0.0, switch_latency_s=0.0, message_s=0.0)
    return _reference_choose(op, nbytes, free)
