"""Every performance check of module moe, both ways: the reference passes it and a wasteful
variant (tests/variants/moe/) fails it while still being correct. The counters are checked
too: the reference's counted bytes are at least the payload (a blind counter would pass
anything) and its operator counts are not zero."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest
from conftest import ROOT, build_variant, by_name, grade_json, measured, module_results

from grader.perf import with_slack

OPS = "test_moe_layer_forward_op_count_does_not_grow_with_tokens"
BYTES = "test_expert_parallel_sends_only_tokens_routed_to_other_ranks"
TIME = "test_moe_layer_forward_time_within_4x_the_reference"


@pytest.fixture(scope="module")
def reference(solutions_results) -> dict[str, dict]:
    """The reference solution's grading (the session's full grading of the solutions)."""
    return module_results(solutions_results, "moe")


def test_reference_op_count_is_the_same_for_t_and_8t_tokens(reference):
    for case in ("dropless-shared", "capacity-1.25"):
        test = reference[f"{OPS}[{case}]"]
        assert test["status"] == "passed", test["output"]
        assert test["extra_data"]["ops_at_T"] == test["extra_data"]["ops_at_8T"] > 0


def test_reference_sends_its_payload_and_no_more(reference):
    test = reference[BYTES]
    assert test["status"] == "passed", test["output"]
    for sent, payload in zip(test["extra_data"]["bytes_sent_per_rank"], test["extra_data"]["payload_bytes_per_rank"]):
        assert payload <= sent <= with_slack(payload), f"counted {sent}, payload {payload}"


@pytest.mark.timed
def test_reference_meets_the_time_ratio(reference_timed_results):
    test = measured(by_name(reference_timed_results)[TIME])
    assert test["status"] == "passed", test["output"]
    assert 0 < test["extra_data"]["time_ratio_vs_reference"] <= 4


@pytest.mark.timed
def test_per_token_combine_is_correct_but_fails_the_op_count_and_the_time_ratio(tmp_path):
    submission = build_variant("moe", "per_token_combine", tmp_path / "submission")
    select = "test_combine or gradients_reach or op_count or time_within"
    tests = by_name(grade_json(submission, "moe", "--select", select, out=tmp_path / "r.json"))
    for name, test in tests.items():
        if "op_count" in name or "time_within" in name:
            assert test["status"] == "failed", name
        else:
            assert test["status"] == "passed", f"{name}: {test['output']}"
    for case in ("dropless-shared", "capacity-1.25"):
        figures = tests[f"{OPS}[{case}]"]["extra_data"]
        assert figures["ops_at_8T"] > 7 * figures["ops_at_T"], figures
        assert "must not depend on the number of tokens" in tests[f"{OPS}[{case}]"]["output"]
    assert measured(tests[TIME])["extra_data"]["time_ratio_vs_reference"] > 4


def test_sending_all_tokens_to_every_rank_is_correct_but_fails_the_bytes_bound(tmp_path):
    submission = build_variant("moe", "all_tokens_to_every_rank", tmp_path / "submission")
    select = "test_expert_parallel_matches or sends_only"
    tests = by_name(grade_json(submission, "moe", "--select", select, out=tmp_path / "r.json"))
    for name, test in tests.items():
        if "sends_only" in name:
            assert test["status"] == "failed", name
            assert "rank 0 sent" in test["output"], test["output"]
        else:
            assert test["status"] == "passed", f"{name}: {test['output']}"
    figures = tests[BYTES]["extra_data"]
    # 3 of 4 ranks' copies of every token out, and a partial output for each back: ~2x payload.
    for sent, payload in zip(figures["bytes_sent_per_rank"], figures["payload_bytes_per_rank"]):
        assert sent > 1.5 * payload, (sent, payload)


@pytest.mark.timed
def test_a_layer_that_sleeps_is_never_passed_while_cpu_burners_slow_the_reference(tmp_path):
    """tests/corpus/moe/tampers_with_the_clock.py (forward sleeps 0.3 s, and slows the clocks it
    can reach) graded while two processes burn both CPUs: the reference's computing slows down and
    the sleep does not, which once brought the ratio under the 4x limit. The timed check must now
    fail, or give no verdict because the machine was busy; never pass."""
    case = ROOT / "tests" / "corpus" / "moe" / "tampers_with_the_clock.py"
    shutil.copytree(ROOT / "solutions" / "moe", tmp_path / "submission" / "moe")
    with open(tmp_path / "submission" / "moe" / "layer.py", "a") as layer:
        layer.write("\n\n" + case.read_text())
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        results = grade_json(tmp_path / "submission", "moe", "--select", "time_within", out=tmp_path / "r.json")
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()
    test = by_name(results)[TIME]
    assert test["status"] == "failed", f"a wasteful layer passed under load: {test['extra_data']}"
    assert test["extra_data"]["kind"] == "unmeasured" or "the limit is 4x" in test["output"], test["output"]
