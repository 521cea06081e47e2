"""Renderings of one GradeReport: terminal text, Gradescope JSON, JUnit XML, GitHub Classroom."""

from __future__ import annotations

from grader.report.classroom import classroom_result
from grader.report.gradescope import gradescope_json
from grader.report.junit import junit_xml
from grader.report.text import text_report
from grader.results import GradeReport

FORMATS = ("text", "json", "gradescope", "junit", "classroom")


def render(report: GradeReport, fmt: str, *, hidden_visibility: str = "visible", color: bool = False) -> str:
    """`json` is the Gradescope shape, as is `gradescope`."""
    if fmt == "text":
        return text_report(report, color=color)
    if fmt in ("json", "gradescope"):
        return gradescope_json(report, hidden_visibility=hidden_visibility)
    if fmt == "junit":
        return junit_xml(report)
    if fmt == "classroom":
        return classroom_result(report)
    raise ValueError(f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}")
