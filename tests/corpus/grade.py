"""Grade corpus cases the way the CLI does, one after another in this process, keeping every
GradeReport whole.

    python tests/corpus/grade.py PLAN.json

PLAN.json: {"groups": [GROUP, ...]}, a GROUP being {"calibrate": CALIBRATION or null, "jobs":
[JOB, ...]} and a JOB {"submission": FOLDER, "modules": [...], "select": EXPR or null,
"time_limit_s": S or null, "out": REPORT.json}. Each job's `GradeReport.to_dict()` is written
to its `out` after its grading has finished (and every worker of it is gone); like `python -m
grader grade --out`, only this process writes the file. Grading many cases in one process shares
its imports and its zygote (grader/sandbox/zygote.py); each case still gets workers of its own.

CALIBRATION is {"submission": REFERENCE, "modules": [...], "select": EXPR, "factor": F}: the
reference is graded first, on the same machine under the same load, and no job of the group gets
a time limit below F times the reference's slowest test. A case that must hang keeps a short limit
on a quiet machine and gets a longer one on a busy machine, where correct calls take longer too.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from grader.course import COURSE_ROOT, Course, load_course
from grader.results import SKIPPED
from grader.runner import grade


def _grade_group(course: Course, group: dict) -> None:
    floor = 0.0
    if calibration := group["calibrate"]:
        reference = Path(calibration["submission"]).resolve()
        report = grade(course, calibration["modules"], reference, select=calibration["select"])
        slowest = max((t.duration_s for t in report.tests if t.status != SKIPPED), default=0.0)
        floor = calibration["factor"] * slowest
    for job in group["jobs"]:
        limit = job["time_limit_s"]
        report = grade(
            course,
            job["modules"] or list(course.modules),
            Path(job["submission"]).resolve(),
            select=job["select"],
            time_limit_s=None if limit is None else max(limit, floor),
        )
        Path(job["out"]).write_text(json.dumps(report.to_dict()))


def main() -> int:
    course = load_course(COURSE_ROOT)
    for group in json.loads(Path(sys.argv[1]).read_text())["groups"]:
        _grade_group(course, group)
    return 0


if __name__ == "__main__":
    sys.exit(main())
