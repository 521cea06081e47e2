"""GitHub Classroom: the base64 JSON that classroom-resources/autograding-grading-reporter reads
from a step's `result` output. The reporter adds up `tests[].score` and `max_score`, so each test
carries its own share of the points and partial credit survives."""

from __future__ import annotations

import base64
import json

from grader.results import PASSED, GradeReport


def classroom_payload(report: GradeReport) -> dict:
    tests = [
        {
            "name": f"{module.name}: {test.name}",
            "status": "pass" if test.status == PASSED else "fail",
            "score": round(test.score, 4),
            "message": test.message,
            "execution_time": f"{test.duration_s:.2f}s",
        }
        for module in report.modules
        for test in module.graded
    ]
    failed = any(t["status"] != "pass" for t in tests)
    return {
        "version": 1,
        "status": "fail" if failed or not tests else "pass",
        "max_score": round(report.max_score, 4),
        "tests": tests,
    }


def classroom_result(report: GradeReport) -> str:
    return base64.b64encode(json.dumps(classroom_payload(report)).encode()).decode()
