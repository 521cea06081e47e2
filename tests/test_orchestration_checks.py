"""Module orchestration: every counted check of the scheduler both ways. The reference passes; a
scheduler that binds pods one by one (the default kube-scheduler without coscheduling) places
partial gangs and deadlocks; a topology-blind placement (most free GPUs first) is all-or-nothing
but fails the network cost of its placements; first come, first served without backfilling keeps
every rule but fails the day's mean wait and utilization against the reference and the least total
wait of small cases. All of it replays traces in whole minutes: no timing, the same verdict on
every machine."""

from __future__ import annotations

from functools import partial

import pytest
from conftest import assert_only_failing, grade_variant, load_solution, module_results

PLACE = "test_place_gang_spans_the_fewest_leaves_then_nodes_then_the_best_fit"
NETWORK = "test_every_placement_of_a_day_costs_the_fewest_spine_and_nic_bytes_on_the_gpus_then_free"
DAY_RULES = "test_day_traces_keep_every_gang_whole_every_quota_and_finish_every_job"
RACE = "test_two_gangs_racing_for_the_same_nodes_start_one_after_the_other"
OPTIMUM = "test_total_wait_of_small_cases_equals_the_least_of_any_schedule"
WAIT = "test_a_days_mean_wait_is_near_the_references"
UTILIZATION = "test_a_days_utilization_is_near_the_references"
RESERVATION = "test_backfilling_never_delays_the_heads_reservation"
COUNTED = (PLACE, NETWORK, DAY_RULES, RACE, OPTIMUM, WAIT, UTILIZATION)

grade = partial(grade_variant, "orchestration")  # grade(tmp_path, variant, select)


@pytest.fixture(scope="module")
def reference(solutions_results) -> dict[str, dict]:
    return module_results(solutions_results, "orchestration")


def test_scheduler_reference_passes_every_counted_check(reference):
    for name in COUNTED:
        assert reference[name]["status"] == "passed", f"{name}: {reference[name]['output']}"


def test_scheduler_binding_pods_one_by_one_places_partial_gangs_and_deadlocks(tmp_path):
    tests = grade(tmp_path, "pod_by_pod", f"{RACE} or {DAY_RULES}")
    assert_only_failing(tests, RACE, DAY_RULES)
    assert "partial gang" in tests[RACE]["output"]
    assert "never finished" in tests[RACE]["output"] and "a deadlock" in tests[RACE]["output"]


def test_scheduler_with_a_topology_blind_placement_fails_the_network_cost(tmp_path):
    tests = grade(tmp_path, "topology_blind", f"{PLACE} or {NETWORK} or {DAY_RULES}")
    assert_only_failing(tests, PLACE, NETWORK)
    assert "on the spine" in tests[NETWORK]["output"]


def test_scheduler_without_backfilling_fails_the_mean_wait_utilization_and_optimum(tmp_path):
    select = f"{WAIT} or {UTILIZATION} or {OPTIMUM} or {DAY_RULES} or {RESERVATION}"
    tests = grade(tmp_path, "fifo_without_backfilling", select)
    assert_only_failing(tests, WAIT, UTILIZATION, OPTIMUM)
    assert "more than 1.25 x the reference" in tests[WAIT]["output"]
    assert "below the reference's" in tests[UTILIZATION]["output"]
    assert "the least any schedule achieves" in tests[OPTIMUM]["output"]


def test_the_suites_day_figures_are_the_reference_solutions_own():
    """The hidden suite holds the reference's mean wait and utilization of each day trace as
    numbers (DAY_TRACES): the reference solution, run here on the same traces, gives them (to the
    suite's rounding), so a change of the solution or of the trace generator cannot leave them stale."""
    from grader.models.cluster import Cluster
    from grader.models.job_trace import default_queues, job_trace, mean_wait, utilization
    from grader.suites.orchestration.test_orchestration_scheduler import DAY_TRACES

    solution = load_solution("orchestration", "scheduler.py")
    for (nodes, seed), (wait, used) in DAY_TRACES.items():
        cluster = Cluster.h100_cluster(nodes, topology="fat_tree")
        jobs = job_trace(seed, nodes)
        events = solution.schedule(jobs, default_queues(cluster), cluster)
        got = (round(mean_wait(events, jobs), 1), round(utilization(events, jobs, cluster, end=24 * 60), 3))
        held = (wait, used)
        assert got == held, f"job_trace({seed}, {nodes}): the reference gives {got}, the suite holds {held}"
