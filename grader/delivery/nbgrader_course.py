"""`python -m grader nbgrader`: a standard nbgrader course directory for the course's modules.

    python -m grader nbgrader --course DIR [MODULE...] [--course-id ID]

writes DIR/nbgrader_config.py and, for each module (default: all), DIR/source/<module>/ with the
module notebook, the stub files and the public tests. The stock commands then run in DIR:
`nbgrader generate_assignment <module>`, `autograde`, `generate_feedback`, `export`.

The notebook's own cells become read-only nbgrader cells; appended to them is one graded cell per
group of checks: the public tests, and each file of the hidden suite (grader/suites/<module>/),
each worth its share of the module's points (the tests' `points` weights). A graded cell is one
call, `grade_cell(module, group, points)`. The first such call of a notebook grades the
notebook's folder in a separate grader process (public tests and hidden suite under pytest, the
student's code only in sandboxed workers, exactly as `python -m grader grade`); each cell prints
its checks' verdicts (names and reasons, never test source) and returns its points, which
nbgrader reads as partial credit.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grader.course import Course, Module, load_course
from grader.points import dyadic_shares
from grader.usage import UsageError

if TYPE_CHECKING:  # the notebook kernel imports this module for grade_cell: keep it light
    import pytest

HELP = "build an nbgrader course directory (config, module notebooks with graded cells, stubs)"

PUBLIC = "public"  # the group of a module's public tests
# nbgrader's path formats take the course id; keep it to characters safe in a folder name.
_COURSE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
# Start-up allowance of one module's grading (interpreter, torch, worker pools), in seconds.
_STARTUP_S = 300


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("modules", nargs="*", metavar="MODULE", help="default: every module")
    parser.add_argument("--course", required=True, metavar="DIR", help="the nbgrader course directory to write")
    parser.add_argument("--course-id", metavar="ID", help="nbgrader course id (default: the name of DIR)")


@dataclass(frozen=True)
class Check:
    """One graded test as nbgrader sees it: the group (graded cell) it counts towards."""

    suite: str  # "public" or "hidden"
    name: str  # the test's name within its file, as in the grader's reports
    group: str
    weight: float
    gpu: bool


class _Inventory:
    """A pytest plugin that records the collected tests instead of running them."""

    def __init__(self) -> None:
        self.checks: dict[str, list[Check]] = {}
        self.problems: list[str] = []

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.problems.append(f"{report.nodeid}: {report.longreprtext.strip().splitlines()[-1]}")

    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        for item in items:
            path = Path(item.path)
            suite = "hidden" if "suites" in path.parts else "public"
            module = path.parent.name
            points = item.get_closest_marker("points")
            check = Check(
                suite=suite,
                name=item.nodeid.split("::", 1)[-1],
                group=PUBLIC if suite == "public" else _group_name(module, path.stem),
                weight=float(points.args[0]) if points else 1.0,
                gpu=item.get_closest_marker("gpu") is not None,
            )
            self.checks.setdefault(module, []).append(check)


def _group_name(module: str, stem: str) -> str:
    """test_attention_flash -> flash; test_ring -> ring (a hidden suite file's group)."""
    name = stem.removeprefix("test_")
    return name.removeprefix(f"{module}_") or name


def collect_checks(course: Course, modules: list[str]) -> dict[str, list[Check]]:
    """Every graded test of `modules` (public and hidden), without running any."""
    import pytest

    from grader.runner import pytest_options, suite_files

    paths = suite_files(course, modules)
    inventory = _Inventory()
    args = [*paths, "--collect-only", *pytest_options(course)]
    code = pytest.main(args, plugins=[inventory]) if paths else pytest.ExitCode.NO_TESTS_COLLECTED
    if inventory.problems or code not in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        reason = "; ".join(inventory.problems) or f"pytest exit code {int(code)}"
        raise UsageError(f"could not collect the tests of {', '.join(modules)}: {reason}")
    return {name: inventory.checks.get(name, []) for name in modules}


def group_points(module: Module, checks: list[Check]) -> dict[str, float]:
    """Each group's share of the module's points on a CPU grader (GPU-only tests do not count,
    as in `python -m grader grade`), on the dyadic grid of grader/points.py, so that the graded
    cells add up to the module's points exactly in nbgrader's gradebook."""
    weights: dict[str, float] = {}
    for check in checks:
        if not check.gpu:
            weights[check.group] = weights.get(check.group, 0.0) + check.weight
    if not sum(weights.values()):
        raise UsageError(f"module {module.name!r} has no test that runs on a CPU: nothing to grade")
    groups = sorted(weights, key=lambda group: (group != PUBLIC, group))
    return dict(zip(groups, dyadic_shares(module.points, [weights[g] for g in groups])))


def grading_budget_s(module: Module, checks: list[Check]) -> int:
    """Seconds one graded cell may take to grade the whole module: every test running into the
    module's per-call time limit, plus start-up."""
    return math.ceil(len(checks) * module.time_limit_s + _STARTUP_S)


def _notebook(course: Course, module: Module, points: dict[str, float]) -> Any:
    import nbformat

    from grader.delivery.nbgrader_cells import GRADED, INTRO, nbgrader_metadata

    path = course.public_tests(module.name) / f"{module.name}.ipynb"
    if path.is_file():
        notebook = nbformat.read(path, as_version=4)
    else:  # a module without a notebook still gets its graded cells
        notebook = nbformat.v4.new_notebook()
        notebook.metadata["kernelspec"] = {
            "display_name": "Python 3 (ipykernel)",
            "language": "python",
            "name": "python3",
        }
    for index, cell in enumerate(notebook.cells):
        cell.metadata["nbgrader"] = nbgrader_metadata(f"{module.name}-{cell.get('id') or index}")
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    intro = nbformat.v4.new_markdown_cell(INTRO, id=f"{module.name}-grading")
    intro.metadata["nbgrader"] = nbgrader_metadata(intro.id)
    notebook.cells.append(intro)
    for group, share in points.items():
        what = "The public tests" if group == PUBLIC else f"The hidden checks '{group}'"
        source = GRADED.format(what=what, points=share, module=module.name, group=group)
        cell = nbformat.v4.new_code_cell(source, id=f"{module.name}-grade-{group}")
        cell.metadata["nbgrader"] = nbgrader_metadata(cell.id, share)
        notebook.cells.append(cell)
    return notebook


def _write_source(course: Course, module: Module, points: dict[str, float], folder: Path) -> list[str]:
    """DIR/source/<module>/: the notebook, the stubs (never solutions/) and the public tests."""
    import nbformat

    assignments = course.public_tests(module.name)
    files = [assignments / name for name in module.files]
    missing = [str(path.relative_to(course.root)) for path in files if not path.is_file()]
    if missing:
        raise UsageError(f"{', '.join(missing)} missing: run `python -m grader sync` first")
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    copied = []
    for path in [*files, *sorted(assignments.glob("test_*.py"))]:
        shutil.copy2(path, folder / path.name)
        copied.append(path.name)
    nbformat.write(_notebook(course, module, points), folder / f"{module.name}.ipynb")
    return copied


_CONFIG = '''"""nbgrader configuration written by `python -m grader nbgrader`: rebuild it rather than edit it."""

from nbgrader.converters import Autograde
from nbgrader.preprocessors import OverwriteCells

from grader.delivery.nbgrader_cells import CourseCellsOnly

c = get_config()  # noqa: F821 (nbgrader defines get_config when it loads this file)

c.CourseDirectory.course_id = {course_id!r}

# The first graded cell of a notebook grades the whole module: allow every test to run into
# its per-call time limit, plus start-up ({budgets}).
c.Execute.timeout = {timeout}

# Students hand in these files beside the notebook: autograde must grade theirs, never put the
# stubs from source/ back in their place.
c.Autograde.exclude_overwriting = {exclude}

# Autograde runs only the course's cells (restored from the gradebook), not cells a student
# added: student code runs only in the grader's sandboxed workers.
_sanitize = list(Autograde.class_traits()["sanitize_preprocessors"].default())
_sanitize.insert(_sanitize.index(OverwriteCells) + 1, CourseCellsOnly)
c.Autograde.sanitize_preprocessors = _sanitize
'''


def _config(course: Course, course_id: str, checks: dict[str, list[Check]]) -> str:
    budgets = {name: grading_budget_s(course.module(name), found) for name, found in checks.items()}
    exclude = {name: list(course.module(name).files) for name in checks}
    return _CONFIG.format(
        course_id=course_id,
        timeout=max(budgets.values()),
        budgets=", ".join(f"{name} {seconds} s" for name, seconds in budgets.items()),
        exclude=json.dumps(exclude, indent=4),
    )


def run(course: Course, options: argparse.Namespace) -> int:
    names = options.modules or list(course.modules)
    for name in names:
        course.module(name)  # an unknown module is a CourseError: exit status 2
    root = Path(options.course)
    if root.exists() and not root.is_dir():
        raise UsageError(f"--course {options.course!r} is a file, not a folder")
    course_id = options.course_id or root.resolve().name
    if not _COURSE_ID.fullmatch(course_id):
        raise UsageError(f"course id {course_id!r} may hold only letters, digits, '_', '.' and '-': pass --course-id")
    checks = collect_checks(course, list(course.modules))  # the config covers every module
    root.mkdir(parents=True, exist_ok=True)
    for name in names:
        module = course.module(name)
        points = group_points(module, checks[name])
        copied = _write_source(course, module, points, root / "source" / name)
        cells = ", ".join(f"{group} {share:g}" for group, share in points.items())
        print(f"source/{name}: {name}.ipynb, {', '.join(copied)}; graded cells (points): {cells}")
    (root / "nbgrader_config.py").write_text(_config(course, course_id, checks))
    print(f"wrote {root / 'nbgrader_config.py'} (course id {course_id!r})")
    print(f"next, in {root}: nbgrader generate_assignment {names[0]}")
    return 0


# ---- in the notebook kernel: the graded cells ----

_RESULTS: dict[tuple[str, str], dict[str, Any] | str] = {}  # (module, folder) -> results or why none


class GradingFailed(Exception):
    """The grader could not grade the notebook's folder (the cell then scores zero)."""


def grade_cell(module: str, group: str, points: float) -> float:
    """Print the verdicts of `group`'s checks of `module` on the notebook's folder and return
    the points they earn: `points` times the passed share of the group's weight.

    The module is graded once per kernel, on the first call, in a separate grader process.
    """
    results = _module_results(module)
    tests = [t for t in results["tests"] if t["group"] == group]
    graded = [t for t in tests if t["status"] != "skipped"]
    total = sum(t["weight"] for t in graded)
    # The group's points shared among its checks on the dyadic grid: the passed shares add up
    # exactly, and to `points` when every check passes.
    shares = dyadic_shares(points, [t["weight"] for t in graded])
    score = sum(share for share, t in zip(shares, graded) if t["status"] == "passed")
    kind = "public tests" if group == PUBLIC else f"hidden checks '{group}'"
    passed = sum(t["status"] == "passed" for t in graded)
    print(f"{module}, {kind}: {passed} of {len(graded)} passed, {score:g} of {points:g} points")
    for test in tests:
        line = f"  {test['status'].upper():8} {test['name']}"
        if test["status"] != "passed" and test["message"]:
            message = test["message"].strip().replace("\n", "\n           ")
            line += f"\n           {message[:600]}"
        print(line)
    if not total:
        print("  no check of this group ran: " + ("; ".join(results["notes"]) or "all were skipped"))
    return score


def _module_results(module: str) -> dict[str, Any]:
    # nbgrader runs a notebook in its own folder: that folder is the submission, whatever
    # GRADER_SUBMISSION (which the notebook's own cells honour) may say.
    folder = Path.cwd().resolve()
    key = (module, str(folder))
    if key not in _RESULTS:
        try:
            _RESULTS[key] = _grade_folder(module, folder)
        except GradingFailed as error:
            _RESULTS[key] = str(error)
    found = _RESULTS[key]
    if isinstance(found, str):
        raise GradingFailed(found)
    return found


def _grade_folder(module: str, folder: Path) -> dict[str, Any]:
    """Grade a snapshot of the folder's .py files in a grader process of its own."""
    with tempfile.TemporaryDirectory(prefix="nbgrader-") as tmp:
        root = Path(tmp)
        (root / module).mkdir()
        for path in folder.glob("*.py"):
            if not path.name.startswith("test_"):
                shutil.copy2(path, root / module / path.name)
        out = root / "results.json"
        completed = subprocess.run(
            [sys.executable, "-m", "grader.delivery.nbgrader_course", module, str(root), str(out)],
            cwd=root,  # failure messages then name the student's files as <module>/<file>.py
            capture_output=True,
            text=True,
        )
        if completed.returncode != 0 or not out.is_file():
            tail = (completed.stderr or completed.stdout).strip()[-1500:]
            raise GradingFailed(f"grading {module} failed (exit status {completed.returncode}): {tail}")
        return json.loads(out.read_text())


# ---- in the grader process that a graded cell starts ----


def main(argv: list[str]) -> int:
    """`python -m grader.delivery.nbgrader_course MODULE SUBMISSION OUT`: grade MODULE of the
    submission folder and write each collected test's group, verdict and reason to OUT (JSON).
    A test the grading never reported (pytest stopped early) counts as failed, so a cut-short
    run cannot score its group on the tests that happened to run."""
    from grader.results import FAILED
    from grader.runner import grade

    module, submission, out = argv
    course = load_course()
    checks = collect_checks(course, [module])[module]
    report = grade(course, [module], Path(submission).resolve())
    verdicts = {(t.suite, t.name): t for t in report.tests}
    tests = []
    for check in checks:
        verdict = verdicts.get((check.suite, check.name))
        if verdict is None:
            status, message = FAILED, "did not run: " + ("; ".join(report.notes) or "the grader reported no verdict")
        else:
            status, message = verdict.status, verdict.message
        tests.append(
            {
                "group": check.group,
                "name": check.name,
                "suite": check.suite,
                "status": status,
                "weight": check.weight,
                "message": message,
            }
        )
    Path(out).write_text(json.dumps({"notes": report.notes, "tests": tests}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
