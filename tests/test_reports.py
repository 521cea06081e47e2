"""Every output format is valid for the tool that reads it: Gradescope's results.json fields,
JUnit XML that parses, GitHub Classroom's base64 JSON; hidden tests never show their source."""

from __future__ import annotations

import base64
import json
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import classroom_reporter
import pytest
from conftest import ROOT, build_variant, prefetched, run_grader

from grader.report import render
from grader.results import GradeReport, ModuleResult, TestResult

# A quick slice of public and hidden tests: with the wrong_shape variant, some pass and some fail.
SELECT = "allreduce_time_ring or reduce_scatter and 2-divisible-float32"  # world size 2 only: cheap




def _grade(fmt: str, submission: str, folder: Path, env=None) -> str:
    out = folder / f"report.{fmt}"
    completed = run_grader(
        "grade",
        "--submission",
        submission,
        "--format",
        fmt,
        "--out",
        str(out),
        "--select",
        SELECT,
        env=env,
    )
    assert completed.returncode == 0, completed.stderr
    return out.read_text()


@prefetched
def grade_in_every_format(folder: Path) -> dict[str, str]:
    """The same slice graded once per format by the CLI, the four gradings at once (each is a
    process that mostly waits on its workers), on a submission whose ring_reduce_scatter returns
    the wrong shape (some tests pass, some fail). The classroom one also appends to GITHUB_OUTPUT."""
    half_broken = str(build_variant("collectives", "wrong_shape", folder / "variant"))
    env = {"GITHUB_OUTPUT": str(folder / "github_output")}
    with ThreadPoolExecutor(max_workers=4) as pool:
        futures = {
            fmt: pool.submit(_grade, fmt, half_broken, folder, env)
            for fmt in ("gradescope", "json", "junit", "classroom")
        }
        texts = {fmt: future.result() for fmt, future in futures.items()}
    texts["github_output"] = (folder / "github_output").read_text()
    return texts


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> dict[str, str]:
    return grade_in_every_format(tmp_path_factory)


def test_gradescope_results_have_the_documented_fields(reports):
    results = json.loads(reports["gradescope"])
    assert isinstance(results["score"], (int, float)) and results["tests"]
    statuses = set()
    for test in results["tests"]:
        assert {"name", "score", "max_score", "status", "output", "visibility", "extra_data"} <= test.keys()
        assert test["status"] in ("passed", "failed") and test["visibility"] in (
            "visible",
            "hidden",
            "after_due_date",
            "after_published",
        )
        assert 0 <= test["score"] <= test["max_score"]
        statuses.add(test["status"])
    assert statuses == {"passed", "failed"}
    assert results["score"] == pytest.approx(sum(t["score"] for t in results["tests"]), abs=0.01)


def test_hidden_failures_show_the_reason_never_the_test_source(reports):
    results = json.loads(reports["json"])
    hidden_failures = [t for t in results["tests"] if t["extra_data"]["suite"] == "hidden" and t["status"] == "failed"]
    assert hidden_failures
    for test in hidden_failures:
        assert "shape" in test["output"]
        for source_marker in ("def test_", "assert_matches(", "submission.function(", "spmd(", '.py", line'):
            assert source_marker not in test["output"], test["output"]


def test_junit_xml_parses_and_counts_failures(reports):
    root = ET.fromstring(reports["junit"])
    suite = root.find("testsuite")
    cases = suite.findall("testcase")
    assert int(suite.get("tests")) == len(cases) > 0
    assert int(suite.get("failures")) == sum(c.find("failure") is not None for c in cases) > 0


def test_classroom_output_decodes_and_carries_partial_credit(reports):
    encoded = reports["classroom"]
    payload = json.loads(base64.b64decode(encoded))
    assert payload["version"] == 1 and payload["status"] == "fail" and payload["max_score"] == 100
    assert {"name", "status", "score", "message"} <= payload["tests"][0].keys()
    earned = sum(t["score"] for t in payload["tests"])
    assert 0 < earned < payload["max_score"], "partial credit must survive (not all-or-nothing)"
    assert reports["github_output"] == f"result={encoded.strip()}\n"


def test_classroom_reporter_shows_why_each_test_failed_and_posts_the_exact_score(reports):
    """A partial run through Classroom's reporter (its rules in tests/classroom_reporter.py):
    each failure's reason is in the Actions log under the test's name, no "line undefined", and
    the posted points are the per-test scores' float sum, equal to the grader's score."""
    payload = json.loads(base64.b64decode(reports["classroom"]))
    run = classroom_reporter.report("collectives", {"COLLECTIVES_RESULTS": reports["classroom"]})
    failures = [line for line in run.log if line.startswith("Error: ")]
    assert failures and all(line.startswith("Error: ❌ collectives: test_") for line in failures), failures
    assert all("shape" in line for line in failures), "the reason of each failure reaches the log"
    assert not any("line undefined" in line for line in run.log)
    score = json.loads(reports["gradescope"])["score"]
    assert 0 < score < 100 and run.notice == f"Points {classroom_reporter.js_number(score)}/100"
    assert sum(t["score"] for t in payload["tests"]) == score


def test_report_round_trips_through_its_dict_form():
    report = GradeReport(
        "course",
        "sub",
        "cpu",
        [
            ModuleResult(
                "m",
                "M",
                10,
                [
                    TestResult("m", "t1", "public", "passed", weight=1),
                    TestResult("m", "t2", "hidden", "failed", weight=3, message="boom"),
                ],
            )
        ],
    )
    report.modules[0].assign_points()
    again = GradeReport.from_dict(json.loads(json.dumps(report.to_dict())))
    assert again.score == report.score == 2.5 and again.max_score == 10
    assert "boom" in render(again, "text")


def test_text_report_to_a_file_has_no_color_codes(tmp_path):
    out = tmp_path / "report.txt"
    completed = run_grader("grade", "--select", "allreduce_time_ring", "--out", str(out))
    assert completed.returncode == 0
    assert "\x1b[" not in out.read_text() and "collectives" in out.read_text()
    assert (ROOT / "README.md").is_file()


@pytest.mark.parametrize("kind", ["timeout", "deadlock"])
def test_a_hang_prints_the_time_limit_hints_once(kind):
    tests = [TestResult("m", f"t{i}", "hidden", "failed", message="stuck", kind=kind) for i in range(3)]
    report = GradeReport("course", "sub", "cpu", [ModuleResult("m", "M", 10, tests)])
    text = render(report, "text")
    assert text.count("--time-limit SECONDS") == 1 and text.count("--no-timeout") == 1, text
    calm = GradeReport("course", "sub", "cpu", [ModuleResult("m", "M", 10, [TestResult("m", "t", "hidden", "failed")])])
    assert "--no-timeout" not in render(calm, "text")


def test_the_to_do_column_lists_the_unwritten_functions_before_those_failures_named():
    tests = [TestResult("m", "t", "hidden", "failed", function="Cache.fork", kind="not_implemented")]
    module = ModuleResult("m", "M", 10, tests, unwritten=["make_cache", "fork_all"])
    assert module.to_implement() == ["make_cache", "fork_all", "Cache.fork"]
