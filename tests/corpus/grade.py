"""Grade one corpus case the way the CLI does, keeping the whole GradeReport.

    python tests/corpus/grade.py SUBMISSION [MODULE ...] [--select EXPR] [--time-limit S] --out REPORT.json

Writes `GradeReport.to_dict()` as JSON to REPORT.json after grading has finished (and every
worker is gone), so a test can rebuild the report and render it in every format. Like
`python -m grader grade --out`, only this process writes the file, and only at the end.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from grader.course import COURSE_ROOT, load_course
from grader.runner import grade


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("submission", type=Path)
    parser.add_argument("modules", nargs="*", help="default: every module")
    parser.add_argument("--select", default=None)
    parser.add_argument("--time-limit", type=float, default=None)
    parser.add_argument("--out", type=Path, required=True)
    options = parser.parse_args()
    course = load_course(COURSE_ROOT)
    report = grade(
        course,
        options.modules or list(course.modules),
        options.submission.resolve(),
        select=options.select,
        time_limit_s=options.time_limit,
    )
    options.out.write_text(json.dumps(report.to_dict()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
