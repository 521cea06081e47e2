"""Every counted check of module parallel_4d, both ways: the reference passes it and a wasteful
variant (tests/variants/parallel_4d/) fails it while its step stays right. The counters are
checked too: the reference's figures sit where the lecture says (a blind counter would pass
anything)."""

from __future__ import annotations

from functools import partial

import pytest
from conftest import assert_only_failing, grade_variant, module_results

EQUAL = "test_one_step_on_a_world_of_8_equals_one_process"
IN_FLIGHT = "test_1f1b_holds_at_most_pp_minus_s_microbatches_on_stage_s"
SCHEDULE = "test_1f1b_runs_m_microbatches_and_holds_min_of_pp_minus_s_and_m_at_its_peak"
TRAFFIC = "test_each_group_carries_what_the_layout_needs_and_nothing_crosses_into_other_groups"

grade = partial(grade_variant, "parallel_4d")  # grade(tmp_path, variant, select)


@pytest.fixture(scope="module")
def reference(solutions_results) -> dict[str, dict]:
    return module_results(solutions_results, "parallel_4d")


def test_reference_holds_pp_minus_s_microbatches_per_stage(reference):
    test = reference[IN_FLIGHT]
    assert test["status"] == "passed", test["output"]
    # mesh dp 1, tp 2, pp 2, cp 2 in order tp-cp-dp-pp: ranks 0-3 are stage 0, ranks 4-7 stage 1
    assert test["extra_data"]["in_flight_per_rank"] == [2, 2, 2, 2, 1, 1, 1, 1], test["extra_data"]


def test_reference_reaches_min_of_pp_minus_s_and_m_on_three_stages(reference):
    # order tp-cp-dp-pp: pp is the slowest coordinate, so each stage is a block of consecutive ranks
    for world, per_stage, peaks in (("dp2-tp1-pp3-cp2", 4, [3, 2, 1]), ("dp1-tp2-pp3-cp1", 2, [2, 2, 1])):
        test = reference[f"{SCHEDULE}[{world}]"]
        assert test["status"] == "passed", test["output"]
        want = [peak for peak in peaks for _ in range(per_stage)]
        assert test["extra_data"]["in_flight_per_rank"] == want, (world, test["extra_data"])


def test_reference_sends_in_every_group_the_mesh_uses(reference):
    test = reference[f"{TRAFFIC}[dp1-tp2-pp2-cp2]"]
    assert test["status"] == "passed", test["output"]
    rank0 = test["extra_data"]["rank_0_bytes_per_group"]
    # rank 0: tp {0, 1}, cp {0, 2}, pp {0, 4}; dp = 1, so its dp-cp group is its cp group
    assert set(rank0) >= {"0/1", "0/2", "0/4"}, rank0
    assert all(rank0[g] > 0 for g in ("0/1", "0/2", "0/4")), rank0


def test_gpipe_gives_the_right_step_but_fails_the_1f1b_bound(tmp_path):
    # the schedule test's worlds of 4 and 6 ranks (its 12 and 24 add nothing here but time)
    tests = grade(tmp_path, "gpipe_schedule", "1f1b and not pp3-cp2")
    assert_only_failing(tests, IN_FLIGHT, SCHEDULE)
    assert "1F1B holds at most pp - s = 2" in tests[IN_FLIGHT]["output"]


def test_repeating_kv_heads_before_the_gather_is_right_but_fails_the_cp_bytes(tmp_path):
    tests = grade(tmp_path, "repeat_kv_before_gathering", f"({EQUAL} or {TRAFFIC}) and dp1-tp2-pp2-cp2")
    assert_only_failing(tests, TRAFFIC)
    assert "in its cp" in tests[f"{TRAFFIC}[dp1-tp2-pp2-cp2]"]["output"]


def test_a_loss_summed_over_the_world_is_right_but_fails_the_group_check(tmp_path):
    tests = grade(tmp_path, "loss_over_the_world", f"({EQUAL} or {TRAFFIC}) and dp2-tp2-pp2-cp1")
    assert_only_failing(tests, TRAFFIC)
    assert "none of its groups" in tests[f"{TRAFFIC}[dp2-tp2-pp2-cp1]"]["output"]
