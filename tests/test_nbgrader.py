"""`python -m grader nbgrader` builds a course that the real nbgrader grades: generate_assignment,
autograde, generate_feedback and export, unchanged, on one student handing in the reference
solutions and one handing in the stubs."""

from __future__ import annotations

import csv
import html
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from conftest import ROOT, prefetched, run_grader
from traitlets.config import Config

from grader.cli import main
from grader.course import load_course
from grader.delivery.nbgrader_course import Check, collect_checks, grading_budget_s
from grader.sync import BEGIN, END

MODULE = "attention"  # the cheapest module to autograde (about 6 s per student)
# A cell the stub student adds: it would give every graded cell full marks if it ran.
CHEAT = "import grader.delivery.nbgrader_course as g\ng.grade_cell = lambda module, group, points: points"


def nbgrader(course: Path, *args: str) -> None:
    """Run a stock nbgrader command in the course folder, as from the activated environment
    (nbgrader runs tools such as alembic from PATH); fail with its log if it fails."""
    env = {k: v for k, v in os.environ.items() if k != "GRADER_SUBMISSION"}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    completed = subprocess.run(
        [sys.executable, "-m", "nbgrader", *args], cwd=course, capture_output=True, text=True, env=env, timeout=900
    )
    assert completed.returncode == 0, f"nbgrader {' '.join(args)} failed:\n{completed.stderr[-3000:]}"


def submit(course: Path, student: str, solution_files: bool) -> None:
    """submitted/<student>/<module>/: the released notebook and stubs, or the solutions copied in."""
    folder = course / "submitted" / student / MODULE
    shutil.copytree(course / "release" / MODULE, folder)
    if solution_files:
        for path in (ROOT / "solutions" / MODULE).glob("*.py"):
            shutil.copy(path, folder / path.name)
    else:
        notebook = nbformat.read(folder / f"{MODULE}.ipynb", as_version=4)
        notebook.cells.insert(3, nbformat.v4.new_code_cell(CHEAT))
        nbformat.write(notebook, folder / f"{MODULE}.ipynb")


@prefetched
def build_and_autograde(folder: Path) -> Path:
    """A course built for every module, then the stock nbgrader steps for MODULE, run once."""
    course = folder / "course"
    completed = run_grader("nbgrader", "--course", str(course), "--course-id", "aiinfra")
    assert completed.returncode == 0, completed.stderr
    nbgrader(course, "generate_assignment", MODULE)
    submit(course, "solved", solution_files=True)
    submit(course, "stubbed", solution_files=False)
    nbgrader(course, "autograde", MODULE)
    nbgrader(course, "generate_feedback", MODULE)
    nbgrader(course, "export")
    return course


@pytest.fixture(scope="module")
def course(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_and_autograde(tmp_path_factory)


@pytest.fixture(scope="module")
def checks() -> dict[str, list[Check]]:
    """Every module's graded tests, as the build sees them."""
    catalog = load_course()
    return collect_checks(catalog, list(catalog.modules))


def text_of(path: Path) -> str:
    """A file's text; for HTML, what a reader sees (tags dropped, entities decoded); for a
    notebook, its cells' sources."""
    if path.suffix == ".ipynb":
        return "\n".join(cell.source for cell in nbformat.read(path, as_version=4).cells)
    text = path.read_text(errors="replace")
    return html.unescape(re.sub(r"<[^>]+>", "", text)) if path.suffix == ".html" else text


def hidden_lines() -> list[str]:
    """Lines of the hidden suite that no public file of the module (stubs, public tests,
    notebook) also has: finding one in a student-facing file means test source leaked."""
    public = "\n".join(text_of(p) for p in (ROOT / "assignments" / MODULE).iterdir() if p.is_file())
    lines = {
        line.strip() for p in (ROOT / "grader" / "suites" / MODULE).glob("*.py") for line in p.read_text().splitlines()
    }
    return sorted(line for line in lines if len(line) > 20 and line not in public)


def solution_lines() -> list[str]:
    """Lines inside the solution fences that the given (unfenced) code does not also have."""
    fenced, given = set(), set()
    for path in (ROOT / "solutions" / MODULE).glob("*.py"):
        inside = False
        for line in (raw.strip() for raw in path.read_text().splitlines()):
            if line in (BEGIN, END):
                inside = line == BEGIN
            elif inside and len(line) > 20 and not line.startswith(("#", '"""')):
                fenced.add(line)
            else:
                given.add(line)
    return sorted(fenced - given)


def verdict_lines(course: Path, student: str) -> list[str]:
    """The verdicts the graded cells printed in `student`'s autograded notebook (grade_cell's
    lines: "PASSED name", "UNMEASURED name", ...)."""
    notebook = nbformat.read(course / "autograded" / student / MODULE / f"{MODULE}.ipynb", as_version=4)
    printed = "".join(o.get("text", "") for c in notebook.cells if c.cell_type == "code" for o in c.outputs)
    verdict = re.compile(r"\s+(PASSED|FAILED|ERROR|SKIPPED|UNMEASURED) ")
    return [line.strip() for line in printed.splitlines() if verdict.match(line)]


def test_autograde_gives_the_solutions_full_marks_and_the_stubs_zero(course):
    grades = {row["student_id"]: row for row in csv.DictReader((course / "grades.csv").read_text().splitlines())}
    points = load_course().module(MODULE).points
    assert set(grades) == {"solved", "stubbed"}, grades
    solved, stubbed = grades["solved"], grades["stubbed"]
    verdicts = verdict_lines(course, "solved")
    assert verdicts, "the solved notebook's graded cells printed no verdict (grade_cell's lines)"
    missed = [line for line in verdicts if not line.startswith("PASSED")]
    if missed and all(line.startswith("UNMEASURED") for line in missed):
        # a timed check on a machine too busy to judge it is worth no points (README): no verdict here either
        pytest.skip(f"the machine was too busy to time the solutions' {missed}")
    assert float(solved["score"]) == float(solved["max_score"]) == points, f"solutions: {solved}; {missed}"
    assert float(stubbed["max_score"]) == points and float(stubbed["score"]) == 0, (
        f"stubs (with a cell patching grade_cell to give full marks): {stubbed}"
    )


def test_autograde_runs_only_the_courses_cells_not_one_a_student_added(course):
    graded = nbformat.read(course / "autograded" / "stubbed" / MODULE / f"{MODULE}.ipynb", as_version=4)
    sources = [cell.source for cell in graded.cells]
    assert CHEAT not in sources, "the student's added cell ran at autograde: is CourseCellsOnly configured?"
    released = nbformat.read(course / "release" / MODULE / f"{MODULE}.ipynb", as_version=4)
    assert sources == [cell.source for cell in released.cells]


def test_release_has_stubs_and_public_tests_but_no_solution_code_or_hidden_test_source(course):
    release = course / "release" / MODULE
    module = load_course().module(MODULE)
    public_tests = {p.name for p in (ROOT / "assignments" / MODULE).glob("test_*.py")}
    assert {p.name for p in release.iterdir()} == {*module.files, *public_tests, f"{MODULE}.ipynb"}
    for name in [*module.files, *public_tests]:
        assert (release / name).read_text() == (ROOT / "assignments" / MODULE / name).read_text(), name
    suites = {p.name for p in (ROOT / "grader" / "suites" / MODULE).iterdir()}
    hidden, solution = hidden_lines(), solution_lines()
    assert len(hidden) > 50 and len(solution) > 20, "the leak checks lost their reference lines"
    for path in release.iterdir():
        text = text_of(path)
        assert path.name not in suites, f"{path.name} of the hidden suite is in the release"
        assert BEGIN not in text, f"{path.name} has a solution fence"
        assert not [line for line in solution if line in text], f"{path.name} holds solution code"
        assert not [line for line in hidden if line in text], f"{path.name} holds hidden test source"


def test_feedback_names_each_hidden_check_and_its_verdict_without_its_code(course, checks):
    hidden_names = [c.name for c in checks[MODULE] if c.suite == "hidden" and not c.gpu]
    hidden = hidden_lines()
    for student, verdict in (("solved", "PASSED"), ("stubbed", "FAILED")):
        feedback = text_of(course / "feedback" / student / MODULE / f"{MODULE}.html")
        missing = [name for name in hidden_names if not re.search(rf"{verdict}\s+{re.escape(name)}", feedback)]
        assert not missing, f"{student}'s feedback does not show {verdict} for {missing[:3]}"
        assert not [line for line in hidden if line in feedback], f"{student}'s feedback holds hidden test source"
    stubbed = text_of(course / "feedback" / "stubbed" / MODULE / f"{MODULE}.html")
    assert "flash_attention_torch is not implemented yet" in stubbed, "the feedback does not say why checks failed"


def test_every_module_is_built_with_its_config_and_graded_cells(course, checks):
    config = Config()
    exec((course / "nbgrader_config.py").read_text(), {"get_config": lambda: config})
    catalog = load_course()
    assert config.CourseDirectory.course_id == "aiinfra"
    assert config.Autograde.exclude_overwriting == {name: list(m.files) for name, m in catalog.modules.items()}
    assert config.Execute.timeout >= max(grading_budget_s(catalog.module(n), c) for n, c in checks.items())
    for name, module in catalog.modules.items():
        notebook = nbformat.read(course / "source" / name / f"{name}.ipynb", as_version=4)
        metadata = [cell.metadata["nbgrader"] for cell in notebook.cells]
        graded = [m for m in metadata if m["grade"]]
        assert all(m["locked"] and m["schema_version"] == 3 for m in metadata), f"{name}: a cell is not read-only"
        assert len({m["grade_id"] for m in metadata}) == len(metadata), f"{name}: grade ids repeat"
        assert len(graded) >= 2, f"{name}: expected a graded cell per group of checks"
        assert sum(m["points"] for m in graded) == module.points, f"{name}: points do not add up exactly"
        assert sorted(p.name for p in (course / "source" / name).glob("*.py")) == sorted(
            [*module.files, *(p.name for p in (ROOT / "assignments" / name).glob("test_*.py"))]
        )


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (["no_such_module"], "unknown module 'no_such_module'"),
        (["--course-id", "my course"], "course id 'my course'"),
    ],
)
def test_bad_input_is_a_one_line_error(args, reason, tmp_path, capsys):
    assert main(["nbgrader", "--course", str(tmp_path / "course"), *args]) == 2
    error = capsys.readouterr().err
    assert reason in error and error.count("\n") == 1, error
    assert not (tmp_path / "course").exists(), "a refused build wrote files"


def test_graded_cell_scores_the_passed_share_of_its_group_as_nbgrader_partial_credit(tmp_path, monkeypatch, capsys):
    from nbgrader.utils import determine_grade

    from grader.delivery import nbgrader_course
    from grader.delivery.nbgrader_cells import nbgrader_metadata

    tests = [
        {"group": "flash", "name": "test_a", "status": "passed", "weight": 1.0, "message": ""},
        {"group": "flash", "name": "test_b", "status": "failed", "weight": 3.0, "message": "lse differs at (0, 3)"},
        {"group": "flash", "name": "test_gpu", "status": "skipped", "weight": 5.0, "message": "needs a GPU"},
        {"group": "mla", "name": "test_c", "status": "failed", "weight": 1.0, "message": "wrong"},
    ]
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(nbgrader_course._RESULTS, (MODULE, str(tmp_path.resolve())), {"notes": [], "tests": tests})
    score = nbgrader_course.grade_cell(MODULE, "flash", 10.0)
    shown = capsys.readouterr().out
    assert score == 2.5, "1 of 4 graded weight passed (the skipped GPU check does not count)"
    assert "PASSED   test_a" in shown and "FAILED   test_b" in shown and "lse differs at (0, 3)" in shown, shown
    assert "test_c" not in shown, "a cell shows only its own group's checks"
    cell = nbformat.v4.new_code_cell("grade_cell(...)")
    cell.metadata["nbgrader"] = nbgrader_metadata("x", 10.0)
    cell.outputs = [nbformat.v4.new_output("execute_result", {"text/plain": repr(score)}, execution_count=1)]
    assert determine_grade(nbformat.from_dict(cell)) == (2.5, 10.0)


def test_graded_cell_fails_when_the_grader_could_not_grade(tmp_path, monkeypatch):
    from grader.delivery import nbgrader_course

    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(nbgrader_course._RESULTS, (MODULE, str(tmp_path.resolve())), "grading attention failed")
    with pytest.raises(nbgrader_course.GradingFailed, match="grading attention failed"):
        nbgrader_course.grade_cell(MODULE, "flash", 10.0)


def test_a_check_the_grading_never_reported_counts_as_failed(tmp_path, monkeypatch):
    import json

    import grader.runner
    from grader.delivery import nbgrader_course
    from grader.results import GradeReport

    def stopped_early(course, modules, submission, **options):
        return GradeReport(course.title, str(submission), "cpu", notes=["pytest stopped early (exit code 2)"])

    monkeypatch.setattr(grader.runner, "grade", stopped_early)
    assert nbgrader_course.main([MODULE, str(tmp_path), str(tmp_path / "out.json")]) == 0
    tests = json.loads((tmp_path / "out.json").read_text())["tests"]
    assert tests and all(t["status"] == "failed" for t in tests), "an unreported check must not count as passed"
    assert all(t["message"] == "did not run: pytest stopped early (exit code 2)" for t in tests), tests[0]
