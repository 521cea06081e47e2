"""The pytest plugin every graded test runs under (registered as a pytest11 entry point).

It gives tests their fixtures: `submission` (the student's module, run in sandboxed workers),
`library` (trusted workers that compute references with the real library) and `device`; and it
turns a submission's failures into short messages written for the student.

Run straight (`pytest assignments/collectives`), it grades nothing: it runs the public tests
against the files next to them and shows what each rank printed. `--no-timeout` lifts the time
limit so that a breakpoint() in your code (it opens on your terminal) can be used at leisure.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from grader.course import COURSE_ROOT, Course, CourseError, load_course
from grader.perf import NO_TRITON, NotMeasuredReliably
from grader.results import UNMEASURED
from grader.sandbox.errors import SubmissionError
from grader.sandbox.zygote import close_zygotes, start_zygote

if TYPE_CHECKING:  # imported when a test first needs them: they import torch
    from grader.sandbox import Library, Submission

_SUBMISSIONS = pytest.StashKey[dict[str, "Submission"]]()
_SESSION = pytest.StashKey[pytest.Session]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("grader", "AI infrastructure course grader")
    group.addoption("--submission", default=None, help="folder holding one folder per module (default: assignments/)")
    group.addoption(
        "--device",
        default="cpu",
        choices=("cpu", "cuda"),
        help="where submissions run: cpu (gloo, Triton interpreter) or cuda (NCCL)",
    )
    group.addoption(
        "--no-timeout", action="store_true", help="no time limit on calls (for debugging with breakpoint())"
    )
    group.addoption("--time-limit", type=float, default=None, help="seconds per call, for every module")
    group.addoption("--grading", action="store_true", help=argparse.SUPPRESS)


def pytest_configure(config: pytest.Config) -> None:
    for marker in (
        "points(n): weight of a graded test within its module (default 1)",
        "perf: a graded performance check (skipped by --no-perf)",
        "gpu: needs a CUDA device (skipped on CPU)",
    ):
        config.addinivalue_line("markers", marker)
    config.stash[_SUBMISSIONS] = {}
    if _runs_course_tests(config) and not config.getoption("collectonly"):
        # Its torch import overlaps with this process's own (the tests' modules import torch).
        # A student's public tests run straight get a lean one: ready when this process needs
        # its first worker, not 1.5 s later (torch._dynamo, which only FLOP counting imports:
        # never inside a timed check, and those are the hidden suites').
        lean = not config.getoption("grading") and not _runs_hidden_suites(config)
        start_zygote(config.getoption("device"), lean=lean)


def _runs_course_tests(config: pytest.Config) -> bool:
    """Whether pytest was pointed at a module's public tests or a hidden suite."""
    for arg in config.args:
        path = Path(arg.split("::")[0]).resolve()
        if path.is_relative_to(COURSE_ROOT / "grader" / "suites") or "assignments" in path.parts:
            return True
    return False


def _runs_hidden_suites(config: pytest.Config) -> bool:
    suites = COURSE_ROOT / "grader" / "suites"
    return any(Path(arg.split("::")[0]).resolve().is_relative_to(suites) for arg in config.args)


def pytest_report_header(config: pytest.Config) -> str | None:
    moved = [Path(a.split("::")[0]).resolve() for a in config.args if "assignments" in Path(a).resolve().parts]
    moved = [p for p in moved if not p.is_relative_to(COURSE_ROOT)]
    if not moved or config.getoption("submission"):
        return None
    return (
        f"grader: these tests run your files next to them ({moved[0]}), but this environment's grader, "
        f"course.toml and hidden suites are those of {COURSE_ROOT}; to use this checkout's, reinstall here: "
        f"make clean && make grade"
    )


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    for submission in config.stash.get(_SUBMISSIONS, {}).values():
        submission.close()
    session = config.stash.get(_SESSION, None)
    if session is not None and _runs_course_tests(config) and not config.getoption("grading"):
        # A student's `pytest assignments/<module>` is over: every report is printed and every
        # worker gone. Leave now, with pytest's exit status, rather than wait a second for the
        # interpreter to tear torch down.
        close_zygotes()
        if (scratch := sys.modules.get("grader.sandbox.scratch")) is not None:
            scratch.remove()  # its atexit would never run
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(int(session.exitstatus))


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config.stash[_SESSION] = session
    if session.config.getoption("grading"):
        # A grading needs workers: the zygote imports torch while pytest collects the tests.
        start_zygote(session.config.getoption("device"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if any({"submission", "library"} & set(getattr(item, "fixturenames", ())) for item in items):
        start_zygote(config.getoption("device"))  # a test run straight: now that it needs one
    if config.getoption("device") == "cuda":
        return
    skip = pytest.mark.skip(reason="needs a GPU: run with --device cuda on a GPU machine")
    for item in items:
        if item.get_closest_marker("gpu"):
            item.add_marker(skip)


@pytest.fixture(scope="session")
def course() -> Course:
    return load_course(COURSE_ROOT)


@pytest.fixture(scope="session")
def device(request: pytest.FixtureRequest) -> str:
    return request.config.getoption("device")


def module_of(path: Path, course: Course) -> str:
    """The module a test file belongs to: the name of the folder it sits in."""
    name = path.parent.name
    if name not in course.modules:
        raise CourseError(f"{path} is not inside a module folder listed in course.toml")
    return name


@pytest.fixture
def submission(request: pytest.FixtureRequest, course: Course, device: str) -> Submission:
    """The student's module, for the module this test file belongs to."""
    config = request.config
    name = module_of(request.path, course)
    cache = config.stash[_SUBMISSIONS]
    if name not in cache:
        from grader.sandbox import Submission

        root = config.getoption("submission")
        # Run straight, a public test runs the files beside it, in whichever checkout it is.
        beside = request.path.parent if "assignments" in request.path.parts else course.public_tests(name)
        directory = Path(root) / name if root else beside
        cache[name] = Submission(
            course.module(name),
            directory,
            device=device,
            echo=not config.getoption("grading"),
            time_limit_s=1e9 if config.getoption("no_timeout") else config.getoption("time_limit"),
        )
    cache[name].case = request.node.name  # named in the report of a call that hangs or crashes
    return cache[name]


@pytest.fixture(scope="session")
def library(device: str) -> Iterator[Library]:
    """Trusted workers computing references with the real library (never the student's code)."""
    from grader.sandbox import Library

    trusted = Library(device=device)
    yield trusted
    trusted.close()


COMPARISON_LINES = 6  # of pytest's account of a failed public assert (the values compared)


def student_message(error: BaseException, public: bool = False) -> str:
    """What a failed test tells the student: never the source of a hidden test. A public test's
    source is the student's to read, so its failed assert keeps pytest's account of the values
    it compared (`assert [5, 4, 3, 2] == [4, 3, 2, 1]`): what came back and what was expected."""
    if isinstance(error, SubmissionError):
        return error.message
    if isinstance(error, NotMeasuredReliably):
        return str(error)
    if isinstance(error, AssertionError):
        # pytest appends "assert <expression>" (from the test's source) to the message.
        text, assertion, compared = str(error).partition("assert ")
        text = text.strip()
        if public and assertion:
            lines = [line for line in (assertion + compared).splitlines() if line.strip()]
            lines = [line for line in lines if not line.lstrip().startswith("+")][:COMPARISON_LINES]
            return "\n".join([text, *lines]) if text else "\n".join(lines)
        return text or "a check of the result failed"
    return f"{type(error).__name__}: {error}"


def _is_public(item: pytest.Item) -> bool:
    return not item.path.is_relative_to(COURSE_ROOT / "grader" / "suites")


def _replay_hint(item: pytest.Item, error: BaseException) -> str:
    """How to run a failed test again on the same inputs (they are random per grading)."""
    if isinstance(error, SubmissionError) and error.kind == "not_implemented":
        return ""
    import grader.testing

    module = item.path.parent.name
    return f"\nreplay: GRADER_SEED={grader.testing.RUN_SEED} make grade ARGS=\"{module} -k '{item.name}'\""


@pytest.hookimpl(specname="pytest_runtest_makereport", tryfirst=True)
def pytest_runtest_makereport_while_grading(item: pytest.Item, call: pytest.CallInfo[Any]) -> pytest.TestReport | None:
    """While grading, a failure's report holds the student's message and nothing else: pytest's
    own representation of a failure (the test's source, its arguments and tensors printed) is
    never shown, and building it cost more than the rest of grading a stub (~35 ms a failure)."""
    if not item.config.getoption("grading") or call.excinfo is None:
        return None
    if call.excinfo.errisinstance(pytest.skip.Exception):
        return None
    return pytest.TestReport(
        item.nodeid,
        item.location,
        dict.fromkeys(item.keywords, 1),
        "failed",
        f"{item.nodeid}\n{student_message(call.excinfo.value, _is_public(item))}",
        call.when,
        [(f"Captured {key} {when}", content) for when, key, content in item._report_sections],
        call.duration,
        call.start,
        call.stop,
        user_properties=item.user_properties,
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[Any]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    marker = item.get_closest_marker("points")
    report.grader_weight = float(marker.args[0]) if marker else 1.0
    if call.excinfo is None or call.excinfo.errisinstance(pytest.skip.Exception):
        return
    error = call.excinfo.value
    report.grader_message = student_message(error, _is_public(item)) + _replay_hint(item, error)
    if not item.config.getoption("grading") and _replay_hint(item, error):
        # Run straight with pytest (a student's loop): the same line, in pytest's own terms.
        import grader.testing

        report.sections.append(("replay", f"GRADER_SEED={grader.testing.RUN_SEED} pytest '{item.nodeid}'"))
    if _needs_missing_triton(error):
        report.grader_message = NO_TRITON
        report.grader_kind = UNMEASURED
    elif isinstance(error, SubmissionError):
        report.grader_kind, report.grader_function = error.kind, error.function
        report.longrepr = f"{item.nodeid}\n{error.message}"
    elif isinstance(error, NotMeasuredReliably):
        report.grader_kind = UNMEASURED


@functools.cache
def _triton_missing() -> bool:
    """Whether this system has no Triton (it has no build for macOS)."""
    try:
        import triton  # noqa: F401
    except ImportError:
        return True
    return False


def _needs_missing_triton(error: BaseException) -> bool:
    """A worker could not import Triton, which this system lacks: the check cannot run here (no
    verdict, no points), which is not the submission's fault."""
    return isinstance(error, SubmissionError) and "No module named 'triton" in error.message and _triton_missing()
