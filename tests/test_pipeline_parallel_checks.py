"""Every performance (counted) check of module pipeline_parallel, both ways: the reference passes
it and a wasteful variant (tests/variants/pipeline_parallel/) fails it while still being valid
and correct. The counters are checked too: the reference's figures are not zero (a blind
counter would pass anything)."""

from __future__ import annotations

from functools import partial

import pytest
from conftest import assert_only_failing, grade_variant, module_results

GPIPE = "test_gpipe_schedule_is_valid_with_bubble_p_minus_1_over_m_plus_p_minus_1_and_m_activations"
ONE_F_ONE_B = "test_one_f_one_b_schedule_has_gpipes_bubble_holding_at_most_p_minus_rank_activations"
INTERLEAVED = "test_interleaved_schedule_cuts_the_bubble_to_p_minus_1_over_vm_plus_p_minus_1"
ZERO_BUBBLE = "test_zero_bubble_schedule_beats_one_f_one_b_at_its_peak_memory_and_meets_the_paper_bound"
FREES = "test_run_schedule_frees_each_activation_when_its_backward_ran"
BYTES = "test_run_schedule_sends_each_activation_and_gradient_across_a_boundary_once"
ORDER = "test_schedules_follow_the_order_their_docstring_gives"
PUBLIC_INTERLEAVED = "test_interleaved_schedule_halves_the_bubble_with_two_chunks"
TORCH_ORDER = "test_interleaved_schedule_orders_f_and_b_as_torch_pipelinings_interleaved_1f1b"
INTERLEAVED_PEAK = "test_interleaved_schedule_holds_2_p_minus_r_minus_1_plus_v_minus_1_b_plus_1_chunks_at_its_peak"
SPLIT_PEAK = "test_run_schedule_keeps_a_split_backwards_graph_until_its_w"
SCHEDULES = "schedule and not real_ranks and not run_schedule"


grade = partial(grade_variant, "pipeline_parallel")  # grade(tmp_path, variant, select)


@pytest.fixture(scope="module")
def reference(solutions_results) -> dict[str, dict]:
    """The reference solution's grading (the session's full grading of the solutions)."""
    return module_results(solutions_results, "pipeline_parallel")


def test_reference_passes_every_counted_check_with_nonzero_counts(reference):
    for name in (GPIPE, ONE_F_ONE_B, INTERLEAVED, ZERO_BUBBLE, FREES, BYTES, INTERLEAVED_PEAK, SPLIT_PEAK):
        assert reference[name]["status"] == "passed", reference[name]["output"]
    split = reference[SPLIT_PEAK]["extra_data"]["zero_bubble_peak_live_per_rank"]
    assert split["zero-bubble on 4 ranks, m=9, one-tensor stages, float64"]["peak_live"] == [4, 4, 4, 4]
    figures = reference[BYTES]["extra_data"]
    assert all(figures["payload_bytes_per_rank"] <= sent for sent in figures["bytes_sent_per_rank"])
    peaks = reference[FREES]["extra_data"]["peak_live_per_rank"]
    assert peaks["1F1B on 4 ranks, m=6, one-tensor stages, float64"]["peak_live"] == [4, 3, 2, 1]
    assert peaks["GPipe on 4 ranks, m=4, one-tensor stages, float64"]["peak_live"] == [4, 4, 4, 4]


def test_one_microbatch_at_a_time_is_valid_but_fails_the_bubble_and_w_at_the_end_fails_the_memory(tmp_path):
    tests = grade(tmp_path, "one_microbatch_at_a_time", SCHEDULES)
    assert_only_failing(
        tests, GPIPE, ONE_F_ONE_B, INTERLEAVED, ZERO_BUBBLE, PUBLIC_INTERLEAVED, ORDER, TORCH_ORDER, INTERLEAVED_PEAK
    )
    assert "idles (p-1)/p of the time" in tests[ONE_F_ONE_B]["output"]
    assert "1F1B's peak is" in tests[ZERO_BUBBLE]["output"]


def test_one_f_one_b_running_every_forward_first_fails_the_memory_bound(tmp_path):
    tests = grade(tmp_path, "one_f_one_b_runs_every_forward_first", "one_f_one_b_schedule and not real_ranks")
    assert_only_failing(tests, ONE_F_ONE_B, f"{ORDER}[one_f_one_b_schedule")
    assert "rank 0 holds 3 microbatches' activations" in tests[ONE_F_ONE_B]["output"]


def test_keeping_every_graph_gives_the_right_gradients_but_fails_the_live_activation_count(tmp_path):
    tests = grade(tmp_path, "keeps_every_graph", "run_schedule and (frees or two_ranks or four_ranks)")
    assert_only_failing(tests, FREES, "test_run_schedule_on_two_ranks_matches_one_process_and_frees_activations")
    assert "drop what a backward used as soon as it ran" in tests[FREES]["output"]


def test_sending_each_activation_twice_gives_the_right_gradients_but_fails_the_byte_count(tmp_path):
    tests = grade(tmp_path, "sends_each_activation_twice", "run_schedule and (across_a_boundary or two_ranks)")
    assert_only_failing(tests, BYTES)
    assert "rank 0 sent" in tests[BYTES]["output"]


def test_the_suites_interleaved_order_is_torch_pipelinings_interleaved_1f1b():
    """The hidden suite grades interleaved_schedule against the reference's order as torch's
    ScheduleInterleaved1F1B's: prove they are the same, for every case it grades."""
    from grader.suites.pipeline_parallel.reference import schedule, torch_interleaved_order
    from grader.suites.pipeline_parallel.test_pipeline_parallel_schedules import TORCH_ORDERS

    for p, m, v in TORCH_ORDERS:
        reference = [[a for a in actions if a[0] in ("F", "B")] for actions in schedule("interleaved", p, m, v)]
        assert reference == torch_interleaved_order(p, m, v), f"p={p}, m={m}, v={v}"
