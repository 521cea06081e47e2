"""`python -m grader public-coverage [MODULE...]`: does every function a student writes have a
public test that fails while that function is still the stub? (instructor-only)

    python -m grader public-coverage MODULE... [--verbose]

Public tests are for learning: a student who has written everything but one function should
see a public test fail, naming that function, before the hidden suite does. For each function
or method holding a fence in solutions/ (what `sync` turns into `raise NotImplementedError`,
grader/sync.py), the module's reference solutions are copied with that one function left as the
stub, and the module's public tests are graded. The function is covered when a public test that
the unchanged reference passes does not pass. Grading runs in this process, so the interpreter,
torch, pytest and the zygote are paid once.

A module whose public tests run ranks must also let the student see the two configurations
students most often get wrong before the hidden suite does: a world of 4 ranks, and, where the
hidden suite hands the ranks a process group that is not the world (`grader.sandbox.Group`, the
ranks of a larger world), such a subgroup. The reference's grading records every world the
public tests start and the groups they hand to the ranks.

Prints each module's functions left uncovered and a distributed module's missing
configurations (with --verbose, also the tests that caught each covered function); exit status
0 when every function of the named modules (default: all) is covered and no configuration is
missing, 1 otherwise.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grader.course import Course
from grader.results import PASSED
from grader.sync import fenced_functions, make_stub
from grader.usage import UsageError

HELP = "check that every function a student writes has a public test that fails while it is the stub"


@dataclass
class Coverage:
    """One module's answer: per function ("file.py:name"), the public tests that caught its stub;
    the world sizes of the public tests' distributed calls, and whether one ran in a subgroup."""

    module: str
    caught: dict[str, list[str]] = field(default_factory=dict)
    world_sizes: set[int] = field(default_factory=set)
    subgroup: bool = False
    needs_subgroup: bool = False  # the hidden suite runs the module's functions in subgroups

    @property
    def uncovered(self) -> list[str]:
        return [function for function, tests in self.caught.items() if not tests]

    @property
    def missing(self) -> list[str]:
        """The configurations a distributed module's public tests never run."""
        if not self.world_sizes:
            return []
        missing = [] if 4 in self.world_sizes else ["a world of 4 ranks"]
        if self.needs_subgroup and not self.subgroup:
            missing.append("a subgroup (grader.sandbox.Group)")
        return missing


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("modules", nargs="*", metavar="MODULE", help="default: every module")
    parser.add_argument(
        "--verbose", action="store_true", help="also list every test that catches each function (grades them all)"
    )


def run(course: Course, options: argparse.Namespace) -> int:
    unknown = [m for m in options.modules if m not in course.modules]
    if unknown:
        raise UsageError(f"unknown module {unknown[0]!r}; modules: {', '.join(course.modules)}")
    modules = options.modules or list(course.modules)
    results = [public_coverage(course, module, every_test=options.verbose) for module in modules]
    for result in results:
        covered = len(result.caught) - len(result.uncovered)
        print(f"{result.module}: {covered} of {len(result.caught)} functions covered")
        for function, tests in result.caught.items():
            if not tests:
                print(f"  not covered: {function} (no public test fails while it is the stub)")
            elif options.verbose:
                print(f"  {function}: {', '.join(tests)}")
        for what in result.missing:
            print(f"  not covered: {what} (worlds of {sorted(result.world_sizes)} ranks only)")
    sys.stdout.flush()
    return 1 if any(r.uncovered or r.missing for r in results) else 0


def public_coverage(course: Course, module: str, *, every_test: bool = False) -> Coverage:
    """Grade `module`'s public tests on the reference, then once per fenced function with that
    function alone left as the stub: the tests named after it first, up to the first that fails,
    then the others; with `every_test`, every test (to list all that catch it)."""
    from grader.runner import grade
    from grader.sandbox.zygote import start_zygote

    start_zygote("cpu")  # once per process: the workers of every grading below fork from it
    spec = course.module(module)
    solutions = course.root / "solutions" / module
    hidden = course.hidden_suite(module)
    needs_subgroup = hidden.is_dir() and any("Group(" in path.read_text() for path in hidden.glob("*.py"))
    coverage = Coverage(module, needs_subgroup=needs_subgroup)
    with tempfile.TemporaryDirectory(prefix=f"public-coverage-{module}-") as scratch:
        submission = Path(scratch)
        folder = submission / module
        shutil.copytree(solutions, folder, ignore=shutil.ignore_patterns("__pycache__"))

        def failures(select: str | None) -> set[str]:
            report = grade(course, [module], submission, public_only=True, select=select, first_failure=not every_test)
            return {test.name for test in report.tests if test.status != PASSED}

        with _recording_worlds(coverage):
            reference = _passed(grade(course, [module], submission, public_only=True))
        for file in spec.files:
            source = (solutions / file).read_text()
            for function in fenced_functions(source):
                origin = f"solutions/{module}/{file}"
                (folder / file).write_text(make_stub(source, module=spec, origin=origin, only=function))
                caught: set[str] = set()
                if not every_test and (named := _named_tests(function, reference)):
                    caught = reference & failures(named)
                if not caught:
                    caught = reference & failures(None)
                coverage.caught[f"{file}:{function}"] = sorted(caught)
            (folder / file).write_text(source)
    return coverage


def _passed(report) -> set[str]:
    return {test.name for test in report.tests if test.status == PASSED}


def _named_tests(function: str, tests: set[str]) -> str | None:
    """A -k expression for the tests named after `function` (most public tests are: the likely
    catchers, graded first), or None when none is."""
    word = function.rpartition(".")[2].strip("_").lower()
    return word if word and any(word in test.lower() for test in tests) else None


@contextmanager
def _recording_worlds(coverage: Coverage) -> Iterator[None]:
    """Note the world size of every distributed call the tests make, and any subgroup handed to
    its ranks (a Group of fewer ranks than the world)."""
    from grader.sandbox.script import Group
    from grader.sandbox.submission import Submission

    original = Submission.run

    def run(self: Submission, steps_per_rank: Any, *, distributed: bool, **kwargs: Any) -> Any:
        if distributed:
            size = len(steps_per_rank)
            coverage.world_sizes.add(size)
            steps = [step for rank_steps in steps_per_rank for step in rank_steps]
            groups = [group for step in steps for group in _groups(step.args, step.kwargs, kind=Group)]
            coverage.subgroup |= any(len(group.ranks) < size for group in groups)
        return original(self, steps_per_rank, distributed=distributed, **kwargs)

    Submission.run = run
    try:
        yield
    finally:
        Submission.run = original


def _groups(*values: Any, kind: type) -> Iterator[Any]:
    for value in values:
        if isinstance(value, kind):
            yield value
        elif isinstance(value, (list, tuple)):
            yield from _groups(*value, kind=kind)
        elif isinstance(value, dict):
            yield from _groups(*value.values(), kind=kind)
