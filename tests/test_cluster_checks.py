"""Every counted check of module cluster, both ways: the reference passes it and a variant
(tests/variants/cluster/) whose sum stays right on real ranks fails it. The counted checks replay
schedules in the given simulator (bytes per link, makespan), so they do not depend on the
machine."""

from __future__ import annotations

from functools import partial

import pytest
from conftest import assert_only_failing, grade_variant, module_results

REAL = "test_schedule_run_on_real_ranks_equals_dist_all_reduce"
FIGURES = "test_simulated_bytes_on_every_link_and_makespan_equal_the_docstrings_schedule"
NIC = "test_hierarchical_sends_n_over_g_per_gpu_on_the_network_and_the_flat_ring_g_times_more"
HALVING = "test_halving_doubling_simulated_bytes_and_makespan_equal_the_docstrings_schedule"

grade = partial(grade_variant, "cluster")  # grade(tmp_path, variant, select)


@pytest.fixture(scope="module")
def reference(solutions_results) -> dict[str, dict]:
    return module_results(solutions_results, "cluster")


def test_reference_passes_every_counted_check(reference):
    for name, test in reference.items():
        if name.startswith((FIGURES, NIC, HALVING)):
            assert test["status"] == "passed", f"{name}: {test['output']}"


def test_a_hierarchical_all_reduce_that_sends_the_whole_buffer_across_nodes_fails_the_nic_bytes(tmp_path):
    select = f"({REAL} and hierarchical) or ({FIGURES} and hierarchical_allreduce) or {NIC}"
    tests = grade(tmp_path, "whole_buffer_across_nodes", select)
    assert_only_failing(tests, FIGURES, NIC)
    assert "only the chunk group the GPU holds" in tests[f"{NIC}[4-8]"]["output"]


def test_halving_doubling_with_the_nearest_partner_first_fails_its_bytes_per_link(tmp_path):
    tests = grade(tmp_path, "nearest_partner_first", f"({REAL} and recursive_halving) or {HALVING}")
    assert_only_failing(tests, HALVING)
    assert "partner at distance p/2" in tests[HALVING]["output"]
