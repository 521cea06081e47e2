"""GitHub Classroom: the base64 JSON that classroom-resources/autograding-grading-reporter@v1
reads from a step's `result` output (environment variable <RUNNER>_RESULTS).

What the reporter does with it (its dist/main.js: ConsoleResults, getTestScore, NotifyClassroom):
- the points it posts to Classroom are the sum of `tests[].score` over `max_score`: each test
  carries its own share (a dyadic number, grader/points.py), so partial credit survives and the
  sum is exact;
- it prints a test's `message` only when its status is "error", and prints "line <line_no>"
  after a test's name unless `line_no` is 0. A failed test is therefore sent as "error" with a
  message that starts with its name (the reporter prints the message alone), and `line_no` is 0;
- its table line per runner is passed / total x max_score, a count of tests, not of points.
"""

from __future__ import annotations

import base64
import json
import re

from grader.results import PASSED, GradeReport

MESSAGE_LINES = 12  # the head of a failure's explanation; `make grade` shows it whole


def runner_id(module: str) -> str:
    """The module's step id and runner name for the reporter, which accepts letters and digits
    only (kv_cache -> kvcache)."""
    return re.sub(r"[^A-Za-z0-9]", "", module)


def classroom_payload(report: GradeReport) -> dict:
    tests = [
        {
            "name": f"{module.name}: {test.name}",
            "status": "pass" if test.status == PASSED else "error",
            "score": test.score,
            "message": "" if test.status == PASSED else failure_message(f"{module.name}: {test.name}", test.message),
            "line_no": 0,
            "execution_time": f"{test.duration_s:.2f}s",
        }
        for module in report.modules
        for test in module.graded
    ]
    failed = any(t["status"] != "pass" for t in tests)
    return {
        "version": 1,
        "status": "fail" if failed or not tests else "pass",
        "max_score": report.max_score,
        "tests": tests,
    }


def failure_message(name: str, reason: str) -> str:
    """What the Actions log shows for a failed test: a cross, its name, why (the first lines)."""
    lines = (reason.strip() or "failed").splitlines()
    if len(lines) > MESSAGE_LINES:
        lines = [*lines[:MESSAGE_LINES], "... (`make grade` shows the rest)"]
    return "\n".join([f"❌ {name}", *("   " + line for line in lines)])


def crashed_payload(module: str, points: float, reason: str) -> dict:
    """The result of a module step whose grading never reported: zero points out of the
    module's, and why, so that the reporter still adds up every module."""
    name = f"{module}: grading did not finish"
    return {
        "version": 1,
        "status": "error",
        "max_score": points,
        "tests": [
            {"name": name, "status": "error", "score": 0, "message": failure_message(name, reason), "line_no": 0}
        ],
    }


def encode(payload: dict) -> str:
    return base64.b64encode(json.dumps(payload).encode()).decode()


def classroom_result(report: GradeReport) -> str:
    return encode(classroom_payload(report))
