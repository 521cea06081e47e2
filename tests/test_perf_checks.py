"""Every performance check, both ways: the reference passes it, a wasteful variant fails it.
The counters themselves are checked too: the reference's counted bytes are at least the bound
(a counter that read zero would pass everything)."""

from __future__ import annotations

import pytest
from conftest import build_variant, by_name, grade_json, measured

from grader.perf import allreduce_bytes_bound, with_slack

NBYTES = 16 * 2**20


def test_reference_meets_the_bytes_bounds_and_the_counter_is_not_blind(solutions_results):
    tests = by_name(solutions_results)
    for name in ("test_ring_reduce_scatter_sends_at_most_its_share", "test_ring_allgather_sends_at_most_its_share"):
        sent, bound = tests[name]["extra_data"]["bytes_sent_per_rank"], tests[name]["extra_data"]["bytes_bound"]
        assert all(bound <= b <= with_slack(bound) for b in sent), f"{name}: counted {sent}, bound {bound}"
    for p in (3, 4):
        test = tests[f"test_ring_allreduce_sends_at_most_the_bandwidth_bound[{p}]"]
        assert test["status"] == "passed", test["output"]
        bound = allreduce_bytes_bound(NBYTES, p)
        for sent in test["extra_data"]["bytes_sent_per_rank"]:
            assert bound <= sent <= with_slack(bound), f"p={p}: counted {sent}, bound {bound}"


@pytest.mark.timed
def test_reference_meets_the_time_ratio_against_gloo(reference_timed_results):
    test = measured(by_name(reference_timed_results)["test_ring_allreduce_time_within_3x_gloo_all_reduce"])
    assert test["status"] == "passed", test["output"]
    assert 0 < test["extra_data"]["time_ratio_vs_gloo"] <= 3


def test_gather_to_root_is_correct_but_fails_the_bytes_bound(tmp_path):
    submission = build_variant("collectives", "gather_to_root", tmp_path / "submission")
    # Correctness at the measured world sizes only (3 and 4): a fresh world costs seconds.
    select = "allreduce_matches and (3-divisible-float32 or 4-divisible-float32) or allreduce_sends_at_most"
    tests = by_name(grade_json(submission, "collectives", "--select", select, out=tmp_path / "r.json"))
    for name, test in tests.items():
        if "matches" in name:
            assert test["status"] == "passed", f"{name}: {test['output']}"
        else:
            assert test["status"] == "failed", name
            assert "rank 0 sent" in test["output"], test["output"]
    hidden = tests["test_ring_allreduce_sends_at_most_the_bandwidth_bound[4]"]
    # Rank 0 sends the sum to 3 ranks: 3N bytes against the bound of 1.5N.
    assert max(hidden["extra_data"]["bytes_sent_per_rank"]) >= 3 * NBYTES


@pytest.mark.timed
def test_small_messages_are_correct_but_fail_the_time_ratio(tmp_path):
    submission = build_variant("collectives", "small_messages", tmp_path / "submission")
    select = "test_ring_allreduce_matches and 4-divisible-float32 or time_within"  # the timed world only
    tests = by_name(grade_json(submission, "collectives", "--select", select, out=tmp_path / "r.json"))
    timed = tests.pop("test_ring_allreduce_time_within_3x_gloo_all_reduce")
    assert all(t["status"] == "passed" for t in tests.values())
    assert measured(timed)["status"] == "failed"
    assert timed["extra_data"]["time_ratio_vs_gloo"] > 3
    assert "x gloo's all_reduce" in timed["output"]


@pytest.mark.parametrize(
    ("variant", "function", "bytes_test"),
    [
        ("reduce_scatter_via_allreduce", "reduce_scatter", "test_ring_reduce_scatter_sends_at_most_its_share"),
        ("allgather_via_root", "allgather", "test_ring_allgather_sends_at_most_its_share"),
    ],
)
def test_wasteful_reduce_scatter_and_allgather_fail_their_bytes_bound(variant, function, bytes_test, tmp_path):
    submission = build_variant("collectives", variant, tmp_path / "submission")
    select = f"test_ring_{function} and 4-divisible-float32 or {bytes_test}"  # the measured world only
    tests = by_name(grade_json(submission, "collectives", "--select", select, out=tmp_path / "r.json"))
    checked = tests.pop(bytes_test)
    assert all(t["status"] == "passed" for t in tests.values()), "the variant must be correct"
    assert checked["status"] == "failed" and "sent" in checked["output"], checked["output"]
