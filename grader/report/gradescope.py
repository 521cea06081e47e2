"""Gradescope's results.json: top-level score and one entry per test.

Fields follow Gradescope's autograder specification: `score`, `max_score`, `status`
("passed"/"failed"), `name`, `output`, `visibility`, `extra_data`; `execution_time` in seconds.
Measured numbers (bytes sent, time ratios) go in `extra_data`. On a GPU, the measurements named
`leaderboard*` (e.g. attention's `leaderboard_ms`) also go to the `leaderboard` section, lower
first for a time (`*_ms`, `*_s`).
"""

from __future__ import annotations

import json

from grader.results import PASSED, GradeReport

LEADERBOARD_PREFIX = "leaderboard"


def leaderboard(report: GradeReport) -> list[dict]:
    """Gradescope leaderboard entries: the `leaderboard*` measurements of a GPU run (a time
    measured on a CPU says nothing about a kernel, so a CPU run has none)."""
    if report.device != "cuda":
        return []
    entries = []
    for module in report.modules:
        for test in module.tests:
            for key, value in test.measurements.items():
                if key.startswith(LEADERBOARD_PREFIX) and isinstance(value, (int, float)):
                    entry = {"name": f"{module.name}: {key}", "value": value}
                    if key.endswith(("_ms", "_s")):
                        entry["order"] = "asc"
                    entries.append(entry)
    return entries


def gradescope_json(report: GradeReport, *, hidden_visibility: str = "visible") -> str:
    tests = []
    for module in report.modules:
        for test in module.graded:
            tests.append(
                {
                    "name": f"{module.name}: {test.name}",
                    "name_format": "text",
                    "number": f"{module.name}",
                    "score": test.score,  # dyadic shares (grader/points.py): they add up exactly
                    "max_score": test.max_score,
                    "status": "passed" if test.status == PASSED else "failed",
                    "output": test.message or "passed",
                    "output_format": "text",
                    "visibility": hidden_visibility if test.suite == "hidden" else "visible",
                    "tags": [module.name, test.suite],
                    "extra_data": {"suite": test.suite, "kind": test.kind, **test.measurements},
                }
            )
    summary = [f"{m.name}: {m.score:.1f}/{m.max_score:g}" for m in report.modules]
    result = {
        "score": report.score,
        "execution_time": round(report.duration_s, 2),
        "output": "; ".join(summary + report.notes),
        "output_format": "text",
        "visibility": "visible",
        "stdout_visibility": "hidden",
        "tests": tests,
    }
    entries = leaderboard(report)
    if entries:
        result["leaderboard"] = entries
    return json.dumps(result, indent=2)
