"""Grading: run the public tests and hidden suites of some modules under pytest, in the grader's
own process, and gather the verdicts into a GradeReport. Student code runs only in workers."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from grader import system
from grader.course import Course
from grader.perf import ON_THIS_SYSTEM
from grader.results import ERROR, FAILED, PASSED, SKIPPED, UNMEASURED, GradeReport, ModuleResult, TestResult


class GradingError(Exception):
    """Grading could not run at all (as opposed to a submission failing its tests)."""


Progress = Callable[[str, int, int], None]  # (event: "collected"/"done", finished, total)


class _Collector:
    """A pytest plugin object that turns reports into TestResults."""

    def __init__(self, course: Course, progress: Progress | None) -> None:
        self.course = course
        self.progress = progress or (lambda *_: None)
        self.results: dict[str, TestResult] = {}
        self.total = 0
        self.problems: list[str] = []

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.total = len(session.items)
        self.progress("collected", 0, self.total)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.problems.append(f"could not load tests from {report.nodeid}: {report.longreprtext[-600:]}")

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        result = self.results.get(report.nodeid)
        if result is None:
            result = self._new_result(report)
            self.results[report.nodeid] = result
        result.duration_s += report.duration
        result.measurements.update(dict(report.user_properties))
        if report.when == "call" or report.failed or report.skipped:
            self._record(result, report)
        if report.when == "teardown":
            self.progress("done", len(self.results), self.total)

    def _new_result(self, report: pytest.TestReport) -> TestResult:
        path = Path(report.fspath)
        suite = "hidden" if "suites" in path.parts else "public"
        name = report.nodeid.split("::", 1)[-1]
        return TestResult(
            module=path.parent.name, name=name, suite=suite, status=PASSED, weight=getattr(report, "grader_weight", 1.0)
        )

    def _record(self, result: TestResult, report: pytest.TestReport) -> None:
        if report.passed:
            return
        if report.skipped:
            result.status = SKIPPED
            longrepr = report.longrepr
            result.message = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
            return
        if result.status in (FAILED, ERROR, UNMEASURED):  # a teardown failure after a failed call
            return
        result.kind = getattr(report, "grader_kind", "")
        result.status = ERROR if report.when != "call" else UNMEASURED if result.kind == UNMEASURED else FAILED
        message = getattr(report, "grader_message", "") or report.longreprtext[-1500:]
        if report.when != "call":
            message = f"the test could not run ({report.when}): {message}"
        result.message = message
        result.function = getattr(report, "grader_function", "")


def suite_files(course: Course, modules: list[str], *, public_only: bool = False) -> list[str]:
    """The test files grading runs: each module's public tests, then its hidden suite."""
    paths = []
    for name in modules:
        paths += sorted(str(p) for p in course.public_tests(name).glob("test_*.py"))
        hidden = course.hidden_suite(name)
        if not public_only and hidden.is_dir():
            paths += sorted(str(p) for p in hidden.glob("test_*.py"))
    return paths


def pytest_options(course: Course) -> list[str]:
    """How the grader runs pytest in its own process: as a grading (the plugin's --grading), no
    terminal output or cache, test files imported by path, and none of the user's addopts. No
    unraisable-exception plugin either: it runs full garbage collections at every session's end
    (0.1 s with torch loaded), and a submission's stray warnings are no verdict. Nor Hypothesis's
    plugin: `@given` tests run without it, and its end-of-session summary imports all of
    Hypothesis under pytest's assertion rewriting (seconds)."""
    return [
        "--grading",
        "-p",
        "no:hypothesispytest",
        "-p",
        "no:terminal",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:unraisableexception",
        "--import-mode=importlib",
        "--rootdir",
        str(course.root),
        "-o",
        "addopts=",
        "-W",
        "ignore::DeprecationWarning",
    ]


REMEASURED = " It was timed again at the end of the grading, and the machine was still too busy."


def _measure_again(course: Course, collector: _Collector, options: list[Any]) -> None:
    """Time once more, at the end of the grading, the timed checks that a busy machine left without
    a verdict (grader/perf.py): the load that stopped them (often this grading's own start-up, or
    another grading beside it) may have passed. A check still unmeasured stays worth no points,
    so that loading the machine never lets a submission escape a timed check, and says that a
    rerun gives its points back."""
    unmeasured = [
        nodeid
        for nodeid, result in collector.results.items()
        if result.status == UNMEASURED and ON_THIS_SYSTEM not in result.message  # a rerun here changes nothing
    ]
    if not unmeasured:
        return
    again = _Collector(course, None)
    pytest.main([str(course.root / nodeid) for nodeid in unmeasured] + options, plugins=[again])
    for nodeid in unmeasured:
        result = again.results.get(nodeid)
        if result is not None and result.status != UNMEASURED:
            result.duration_s += collector.results[nodeid].duration_s
            collector.results[nodeid] = result
        else:  # before the replay line, which stays last (grader/report/text.py)
            kept = collector.results[nodeid]
            said, replay, rest = kept.message.partition("\nreplay:")
            kept.message = said + REMEASURED + replay + rest


def grade(
    course: Course,
    modules: list[str],
    submission: Path,
    *,
    device: str = "cpu",
    perf: bool = True,
    public_only: bool = False,
    progress: Progress | None = None,
    time_limit_s: float | None = None,
    select: str | None = None,
    first_failure: bool = False,
    files_first: list[str] | None = None,
) -> GradeReport:
    """Grade `modules` of the submission folder `submission` (one sub-folder per module); with
    `first_failure`, stop at the first test that fails (the tests after it are not in the report);
    with `files_first`, the test files whose name holds one of those words run before the others."""
    from grader.todo import unwritten

    started = time.perf_counter()
    paths = suite_files(course, modules, public_only=public_only)
    if files_first:
        paths.sort(key=lambda path: not any(word in Path(path).stem for word in files_first))  # stable sort
    args: list[Any] = [*paths, "--submission", str(submission), "--device", device, *pytest_options(course)]
    if not perf:
        args += ["-m", "not perf"]
    if time_limit_s is not None:
        args += ["--time-limit", str(time_limit_s)]
    if select:
        args += ["-k", select]
    if first_failure:
        args.append("--exitfirst")
    collector = _Collector(course, progress)
    code = pytest.main(args, plugins=[collector]) if paths else pytest.ExitCode.NO_TESTS_COLLECTED
    _measure_again(course, collector, args[len(paths) :])

    if code == pytest.ExitCode.USAGE_ERROR:
        raise GradingError("pytest refused the arguments (is the --select expression valid?)")
    report = GradeReport(course.title, str(submission), device)
    report.notes += collector.problems
    if code in (pytest.ExitCode.INTERRUPTED, pytest.ExitCode.INTERNAL_ERROR):
        report.notes.append(f"pytest stopped early (exit code {int(code)})")
    if not collector.results:
        report.notes.append("no test was run (nothing matched the modules and --select given)")
    elif select:
        report.notes.append(f"the scores cover only the tests that --select {select!r} picked, not whole modules")
    for name in modules:
        module = course.module(name)
        result = ModuleResult(name, module.title, module.points)
        result.tests = [t for t in collector.results.values() if t.module == name]
        result.unwritten = unwritten(module, submission / name)
        result.assign_points()
        report.modules.append(result)
    unmeasured = [t for m in report.modules for t in m.unmeasured()]
    if uncounted := sum(ON_THIS_SYSTEM in t.message for t in unmeasured):
        report.notes.append(
            f"{uncounted} check(s) {ON_THIS_SYSTEM} (each says why): they give no points here; grade on Linux for them"
        )
    if timed := len(unmeasured) - uncounted:
        report.notes.append(
            f"{timed} timed check(s) not measured reliably: the machine was busy, during the grading and again "
            "at its end. They give no points for now; rerun the grading on a quieter machine to get them back."
        )
    if not system.sandboxed():
        report.notes.append(system.UNSANDBOXED)
    if not perf:
        report.notes.append("performance checks were skipped (--no-perf)")
    if public_only:
        report.notes.append("only public tests were run (--public-only)")
    report.duration_s = time.perf_counter() - started
    return report
