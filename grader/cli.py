"""`python -m grader`: grade, sync, list, bench, and the delivery commands (grader/delivery/).

Exit status: 0 when the command did its job (grading completed, whatever the score); 2 with a
one-line reason when it could not run (bad arguments, a missing folder, a broken course.toml).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from pathlib import Path

from grader.course import COURSE_ROOT, Course, CourseError, load_course
from grader.delivery import COMMANDS
from grader.report import FORMATS, render
from grader.runner import GradingError
from grader.sync import SyncError, stale, write_stubs
from grader.system import SandboxUnavailable, unsupported
from grader.usage import UsageError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m grader", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)

    grade = commands.add_parser("grade", help="grade a submission and print the scoreboard")
    grade.add_argument("modules", nargs="*", metavar="MODULE", help="default: every module")
    grade.add_argument(
        "--submission", default="assignments", help="folder with one folder per module (default: assignments)"
    )
    grade.add_argument("--format", default="text", choices=FORMATS)
    grade.add_argument("--out", help="write the report to this file instead of standard output")
    grade.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    grade.add_argument("--no-perf", action="store_true", help="skip performance checks")
    grade.add_argument("--public-only", action="store_true", help="run only the public tests")
    grade.add_argument("--time-limit", type=float, help="seconds per call (default: course.toml)")
    grade.add_argument("-k", "--select", metavar="EXPR", help="only tests matching this pytest -k expression")

    watch = commands.add_parser("watch", help="a module's public tests, again on every save")
    watch.add_argument("module", metavar="MODULE")
    watch.add_argument("--submission", default="assignments", help="folder holding the module (default: assignments)")
    watch.add_argument("-k", "--select", metavar="EXPR", help="only tests matching this pytest -k expression")
    watch.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    watch.add_argument("--max-gradings", type=int, default=0, help=argparse.SUPPRESS)

    sync = commands.add_parser("sync", help="generate assignments/ stubs from solutions/")
    sync.add_argument("modules", nargs="*", metavar="MODULE")
    sync.add_argument("--check", action="store_true", help="fail if assignments/ is stale")

    commands.add_parser("list", help="the syllabus: modules, files, functions, points")

    bench = commands.add_parser("bench", help="reference figures beside library anchors and bounds")
    bench.add_argument("modules", nargs="*", metavar="MODULE", help="modules, or engine for the grader's own figures")

    for name, module in _delivery_commands().items():
        module.add_arguments(commands.add_parser(name, help=module.HELP))
    return parser


def _delivery_commands() -> dict:
    """The delivery commands that exist in this tree (a student's release ships only some)."""
    found = {}
    for name, path in COMMANDS.items():
        try:
            found[name] = importlib.import_module(path)
        except ModuleNotFoundError as error:
            if error.name != path:
                raise
    return found


def _modules(course: Course, names: list[str]) -> list[str]:
    for name in names:
        course.module(name)  # raises CourseError for an unknown module
    return names or list(course.modules)


def _grade(course: Course, options: argparse.Namespace) -> int:
    from grader.runner import grade

    modules = _modules(course, options.modules)
    submission = Path(options.submission)
    if not submission.is_dir():
        raise UsageError(f"submission folder {options.submission!r} does not exist")
    if options.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise UsageError("--device cuda, but torch sees no CUDA device")
    report = grade(
        course,
        modules,
        submission.resolve(),
        device=options.device,
        perf=not options.no_perf,
        public_only=options.public_only,
        time_limit_s=options.time_limit,
        select=options.select,
        progress=_progress_bar() if options.format == "text" else None,
    )
    report.submission = options.submission
    color = options.format == "text" and options.out is None and sys.stdout.isatty()
    text = render(report, options.format, hidden_visibility=course.hidden_visibility, color=color)
    if options.out:
        Path(options.out).write_text(text)
    else:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    if options.format == "classroom":
        # The step's log: the scoreboard with every failure's reason, which the reporter
        # prints only in part.
        sys.stderr.write(render(report, "text"))
        if os.environ.get("GITHUB_OUTPUT"):
            with open(os.environ["GITHUB_OUTPUT"], "a") as github_output:
                github_output.write(f"result={text}\n")
    return 0


def _progress_bar():
    """A progress bar on standard error while grading (only on a terminal)."""
    if not sys.stderr.isatty():
        return None
    from rich.console import Console
    from rich.progress import Progress

    progress = Progress(console=Console(stderr=True), transient=True)
    task = progress.add_task("grading", total=None)

    def update(event: str, done: int, total: int) -> None:
        if event == "collected":
            progress.start()
            progress.update(task, total=total)
        progress.update(task, completed=done)
        if total and done >= total:
            progress.stop()

    return update


def _watch(course: Course, options: argparse.Namespace) -> int:
    from grader.watch import watch

    _modules(course, [options.module])  # an unknown module is a usage error
    submission = Path(options.submission).resolve()
    if not (submission / options.module).is_dir():
        raise UsageError(f"there is no folder {options.submission}/{options.module}")
    try:
        return watch(
            course, options.module, submission, select=options.select, device=options.device,
            max_gradings=options.max_gradings,
        )  # fmt: skip
    except KeyboardInterrupt:
        return 0


def _sync(course: Course, options: argparse.Namespace) -> int:
    if not (course.root / "solutions").is_dir():
        raise UsageError("there is no solutions/ folder here: sync runs in the course's source repository")
    if options.check:
        problems = stale(course)
        if problems:
            print("assignments/ is stale; run `python -m grader sync`:\n" + "\n\n".join(problems))
            return 1
        print("assignments/ is in sync with solutions/")
        return 0
    changed = write_stubs(course, _modules(course, options.modules))
    for path in changed:
        print(f"wrote {path.relative_to(course.root)}")
    print(f"{len(changed)} file(s) changed")
    return 0


def _list(course: Course) -> int:
    from grader.todo import split_functions

    print(course.title)
    for module in course.modules.values():
        print(f"\n{module.name} ({module.points:g} points): {module.title}")
        print(f"  lecture: {module.lecture}; time limit per call {module.time_limit_s:g} s")
        written, given = split_functions(module)
        print("  you write:")
        for function in written:
            print(f"  - {function.name} in {module.name}/{function.file}  [{function.section}]")
        if given:
            print("  given (the course's code, in your files; you call it, the grader re-installs it):")
            print("    " + ", ".join(function.name for function in given))
    return 0


def _bench(course: Course, options: argparse.Namespace) -> int:
    from grader.bench import run_benchmarks

    if not (course.root / "solutions").is_dir():
        raise UsageError("bench measures the reference solutions, and there is no solutions/ folder here")

    names = options.modules or [*course.modules, "engine"]
    _modules(course, [n for n in names if n != "engine"])  # an unknown name is a usage error
    run_benchmarks(course, names)
    return 0


def main(argv: list[str] | None = None) -> int:
    if why := unsupported():
        print(f"grader: {why}", file=sys.stderr)
        return 2
    options = _parser().parse_args(argv)
    try:
        course = load_course(COURSE_ROOT)
        if options.command == "grade":
            return _grade(course, options)
        if options.command == "sync":
            return _sync(course, options)
        if options.command == "watch":
            return _watch(course, options)
        if options.command == "list":
            return _list(course)
        if options.command == "bench":
            return _bench(course, options)
        return _delivery_commands()[options.command].run(course, options)
    except (UsageError, CourseError, SyncError, GradingError, SandboxUnavailable) as error:
        print(f"grader: {error}", file=sys.stderr)
        return 2
