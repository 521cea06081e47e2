"""The GitHub Classroom release (`python -m grader release`) and the GPU grading workflow: the
release holds no solution code and no hidden suite, grades its public tests with its own grader,
and both workflows call actions only with the inputs those actions document."""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import classroom_reporter
import pytest
import yaml
from conftest import ROOT, run_grader

from grader.course import load_course
from grader.delivery.release import INSTRUCTOR_TARGETS, write_release
from grader.report import render
from grader.results import GradeReport, ModuleResult, TestResult
from grader.sync import BEGIN, END
from grader.usage import UsageError

# The inputs each action declares in its action.yml (actions/checkout v4, actions/setup-python v5,
# actions/upload-artifact v4, actions/upload-pages-artifact v3, actions/deploy-pages v4) or, for
# the Classroom reporter, in its README (it reads the results from <RUNNER ID>_RESULTS
# environment variables, not inputs).
ACTION_INPUTS = {
    "actions/checkout": {
        "repository", "ref", "token", "ssh-key", "ssh-known-hosts", "ssh-strict", "ssh-user",
        "persist-credentials", "path", "clean", "filter", "sparse-checkout", "sparse-checkout-cone-mode",
        "fetch-depth", "fetch-tags", "show-progress", "reference", "lfs", "submodules", "set-safe-directory",
        "github-server-url",
    },
    "actions/setup-python": {
        "python-version", "python-version-file", "cache", "architecture", "check-latest", "token",
        "cache-dependency-path", "update-environment", "allow-prereleases", "ignore-platform-version",
    },
    "actions/upload-artifact": {
        "name", "path", "if-no-files-found", "retention-days", "compression-level", "overwrite",
        "include-hidden-files",
    },
    "actions/upload-pages-artifact": {"name", "path", "retention-days"},
    "actions/deploy-pages": {"token", "timeout", "error_count", "reporting_interval", "artifact_name", "preview"},
    "classroom-resources/autograding-grading-reporter": {"runners"},
}  # fmt: skip
HIDDEN_SUITE_MARKER = '"""Hidden suite'


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("release") / "student-template"
    completed = run_grader("release", "--out", str(out), timeout=120)
    assert completed.returncode == 0, f"release failed:\n{completed.stderr[-2000:]}"
    return out


def _released_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


def _code_lines(path: Path) -> list[str]:
    """The stripped, non-blank lines of a text file; for a notebook, of its cells' sources."""
    try:
        text = path.read_text()
    except UnicodeDecodeError:  # a figure
        return []
    if path.suffix == ".ipynb":
        text = "\n".join("".join(cell["source"]) for cell in json.loads(text)["cells"])
    return [line.strip() for line in text.splitlines() if line.strip()]


def _fenced_bodies(path: Path) -> list[list[str]]:
    """The code of every fenced region of a solution file (stripped, without blanks and comments)."""
    bodies: list[list[str]] = []
    body: list[str] | None = None
    for line in path.read_text().splitlines():
        stripped = line.strip()
        if stripped == BEGIN:
            body = []
        elif stripped == END and body is not None:
            bodies.append(body)
            body = None
        elif body is not None and stripped and not stripped.startswith("#"):
            body.append(stripped)
    return [b for b in bodies if b]


def _leaks(bodies: dict[str, list[list[str]]], files: dict[str, list[str]]) -> list[str]:
    """Where a solution body shows in a released file: any run of 3 of its consecutive lines
    (all of it when shorter) found as consecutive lines of the file. Runs under 20 characters
    (`return out`) say nothing about where they came from."""
    found = []
    for file, lines in files.items():
        runs = {tuple(lines[i : i + n]) for n in (1, 2, 3) for i in range(len(lines) - n + 1)}
        for origin, regions in bodies.items():
            for body in regions:
                width = min(3, len(body))
                for i in range(len(body) - width + 1):
                    window = tuple(body[i : i + width])
                    if len("".join(window)) >= 20 and window in runs:
                        found.append(f"{file} holds {origin}: {list(window)}")
                        break
    return found


def _solution_bodies() -> dict[str, list[list[str]]]:
    bodies = {str(p.relative_to(ROOT)): _fenced_bodies(p) for p in sorted((ROOT / "solutions").rglob("*.py"))}
    return {origin: regions for origin, regions in bodies.items() if regions}


def _declared(leak: str) -> bool:
    """A leak course.toml declares: assignments/<m>/... (or its pristine copy in grader/given/<m>/)
    holding solutions/<r>/... where module m `reveals` r (its given code is r's answer, published
    after r's deadline)."""
    file, origin = leak.split(" holds ")[0], leak.split(" holds ")[1].split(":")[0]
    parts, source = Path(file).parts, Path(origin).parts
    if parts[:2] == ("grader", "given"):  # the pristine copy of assignments/<m>/... (grader/sandbox/given.py)
        parts = ("assignments", *parts[2:])
    if parts[0] != "assignments" or source[0] != "solutions":
        return False
    return source[1] in load_course().module(parts[1]).reveals


def test_release_contains_no_solution_body(release):
    bodies = _solution_bodies()
    assert bodies, "found no fenced region in solutions/: has the fence marker changed?"
    files = {str(p.relative_to(release)): _code_lines(p) for p in _released_files(release)}
    leaks = [leak for leak in _leaks(bodies, files) if not _declared(leak)]
    assert not leaks, "solution code in the release:\n" + "\n".join(leaks[:10])


def test_the_only_declared_leak_is_servings_given_paged_cache(release):
    """serving `reveals` kv_cache: its given paged.py is kv_cache's PagedKVCache (the issue asks
    for the module to stand on its own); no other module's answer shows anywhere."""
    files = {str(p.relative_to(release)): _code_lines(p) for p in _released_files(release)}
    leaks = [leak.split(":")[0].split(" holds ") for leak in _leaks(_solution_bodies(), files) if _declared(leak)]
    declared = {tuple(pair) for pair in leaks}
    assert declared == {
        ("assignments/serving/paged.py", "solutions/kv_cache/paged.py"),
        ("grader/given/serving/paged.py", "solutions/kv_cache/paged.py"),  # its pristine copy
    }, declared


def test_leak_check_finds_every_solution_file_copied_into_a_release():
    bodies = _solution_bodies()
    for origin in bodies:
        copied = {f"assignments/{origin}": _code_lines(ROOT / origin)}
        assert _leaks(bodies, copied), f"the leak check would miss {origin} copied into a release"


def test_release_has_no_fence_no_hidden_suite_and_no_instructor_folder(release):
    suite_texts = {p.read_text() for p in (ROOT / "grader" / "suites").rglob("*.py") if p.stat().st_size}
    for path in _released_files(release):
        relative = path.relative_to(release).as_posix()
        instructor_only = ("solutions/", "grader/suites/", "tests/", "lectures/scripts/", "site/", "build/")
        assert not relative.startswith(instructor_only), relative
        lines = _code_lines(path)
        fences = [line for line in lines if line in (BEGIN, END)]
        # grader/sync.py documents the fences with an example whose body is `...`; nothing else may have one.
        assert not fences or (relative == "grader/sync.py" and "..." in lines), f"{relative} has a solution fence"
        text = "\n".join(lines)
        assert HIDDEN_SUITE_MARKER not in text, f"{relative} holds hidden-suite source"
        assert path.read_text(errors="replace") not in suite_texts, f"{relative} is a copy of a hidden suite file"
    assert sorted(p.name for p in (release / "grader" / "delivery").iterdir()) == ["__init__.py"]


def _module_steps(release: Path) -> list[dict]:
    workflow = yaml.safe_load((release / ".github" / "workflows" / "classroom.yml").read_text())
    return [s for s in workflow["jobs"]["run-autograding-tests"]["steps"] if "id" in s]


def _run_step(step: dict, student: Path, python: str, tmp_path: Path) -> tuple[subprocess.CompletedProcess, str]:
    """Run a module step's script as GitHub Actions does (bash -e), with `.venv/bin/python` a
    launcher of `python`; return the process and the step's GITHUB_OUTPUT."""
    launcher = student / ".venv" / "bin" / "python"
    launcher.parent.mkdir(parents=True, exist_ok=True)
    launcher.write_text(f'#!/bin/sh\nexec {python} "$@"\n')
    launcher.chmod(0o755)
    output = tmp_path / f"github_output_{step['id']}"
    output.write_text("")
    env = {**os.environ, "PYTHONPATH": str(student), "GITHUB_OUTPUT": str(output)}
    completed = subprocess.run(
        ["bash", "-e", "-c", step["run"]], cwd=student, env=env, capture_output=True, text=True, timeout=300
    )
    return completed, output.read_text()


def _result(github_output: str) -> str:
    (line,) = [line for line in github_output.splitlines() if line.startswith("result=")]
    return line.removeprefix("result=")


@pytest.fixture(scope="module")
def graded_steps(release, tmp_path_factory) -> dict[str, tuple[subprocess.CompletedProcess, str]]:
    """The release's attention step run on the reference solutions, and its kv_cache step where
    the course's environment failed to install (the launcher exits 127 before grading)."""
    tmp_path = tmp_path_factory.mktemp("steps")
    student = tmp_path / "student"
    shutil.copytree(release, student)
    for file in load_course().module("attention").files:
        shutil.copy(ROOT / "solutions" / "attention" / file, student / "assignments" / "attention" / file)
    steps = {s["id"]: s for s in _module_steps(release)}
    graded = {"attention": _run_step(steps["attention"], student, sys.executable, tmp_path)}
    broken = tmp_path / "no-python"
    broken.write_text("#!/bin/sh\necho 'python: not installed' >&2\nexit 127\n")
    broken.chmod(0o755)
    graded["kvcache"] = _run_step(steps["kvcache"], student, str(broken), tmp_path)
    return graded


def test_release_grades_its_public_tests_with_its_own_grader_as_the_workflow_does(release, graded_steps, tmp_path):
    student = tmp_path / "student"
    shutil.copytree(release, student)
    which = subprocess.run(
        [sys.executable, "-c", "import grader; print(grader.__file__)"],
        cwd=student,
        env={**os.environ, "PYTHONPATH": str(student)},
        capture_output=True,
    )
    assert Path(which.stdout.decode().strip()).is_relative_to(student), "the release's own grader must be imported"
    completed, github_output = graded_steps["attention"]
    assert completed.returncode == 0, completed.stderr[-2000:]
    payload = json.loads(base64.b64decode(_result(github_output)))
    public = (release / "assignments" / "attention" / "test_attention.py").read_text()
    names = [t["name"].removeprefix("attention: ") for t in payload["tests"]]
    assert names and all(f"def {n.split('[')[0]}(" in public for n in names), f"not public tests: {names}"
    assert payload["status"] == "pass", [t["message"][:300] for t in payload["tests"] if t["status"] != "pass"]
    assert payload["max_score"] == 100 and sum(t["score"] for t in payload["tests"]) == 100
    assert "100.0 / 100" in completed.stderr, "the step's log shows the scoreboard"


def test_a_step_whose_grading_never_ran_still_leaves_a_zero_score_result_that_says_why(graded_steps):
    completed, github_output = graded_steps["kvcache"]
    assert completed.returncode == 0, completed.stderr
    payload = json.loads(base64.b64decode(_result(github_output)))
    assert payload["max_score"] == load_course().module("kv_cache").points
    assert payload["status"] == "error" and [t["score"] for t in payload["tests"]] == [0]
    assert "did not finish" in payload["tests"][0]["message"]


def test_the_classroom_reporter_adds_up_every_module_and_shows_why_one_failed(release, graded_steps):
    """Classroom's reporter (its rules in tests/classroom_reporter.py) on the workflow's own
    env and runners: the reference's attention step and a kv_cache step that never graded."""
    workflow = yaml.safe_load((release / ".github" / "workflows" / "classroom.yml").read_text())
    reporter = workflow["jobs"]["run-autograding-tests"]["steps"][-1]
    outputs = {runner: _result(output) for runner, (_, output) in graded_steps.items()}
    env = {
        name: outputs[value.split("steps.")[1].split(".")[0]]
        for name, value in reporter["env"].items()
        if value.split("steps.")[1].split(".")[0] in outputs
    }
    run = classroom_reporter.report("attention,kvcache", env)
    points = load_course().module("kv_cache").points
    assert run.notice == f"Points 100/{100 + points:g}", run.log
    assert run.table == {"attention": 100, "kvcache": 0}
    assert any("kv_cache: grading did not finish" in line and "install" in line for line in run.log), run.log
    assert not any(" - line " in line for line in run.log), "line_no 0 hides 'line undefined'"
    assert run.failed


def test_classroom_workflow_has_one_step_per_module_and_feeds_the_reporter(release):
    workflow = yaml.safe_load((release / ".github" / "workflows" / "classroom.yml").read_text())
    assert workflow["name"] == "Autograding Tests", "the Classroom reporter needs this workflow name"
    assert list(workflow["jobs"]) == ["run-autograding-tests"], "the Classroom reporter needs this one job"
    steps = workflow["jobs"]["run-autograding-tests"]["steps"]
    modules = list(load_course().modules)
    runners = [m.replace("_", "") for m in modules]
    graded = _module_steps(release)
    assert [s["id"] for s in graded] == runners
    for module, step in zip(modules, graded):
        assert f".venv/bin/python -m grader grade {module} --public-only --format classroom" in step["run"]
        assert step["if"] == "${{ !cancelled() }}", "a module step runs even when an earlier one failed"
    reporter = steps[-1]
    assert reporter["uses"] == "classroom-resources/autograding-grading-reporter@v1"
    assert reporter["if"] == "${{ !cancelled() }}", "the reporter runs whatever happened before it"
    assert re.fullmatch(classroom_reporter.RUNNERS_PATTERN, reporter["with"]["runners"])
    assert reporter["with"]["runners"].split(",") == runners
    assert reporter["env"] == {f"{r.upper()}_RESULTS": f"${{{{ steps.{r}.outputs.result }}}}" for r in runners}
    install = next(s["run"] for s in steps if "make" in s.get("run", ""))
    pin = next(
        line.split("=", 1)[1].strip()
        for line in (ROOT / "Makefile").read_text().splitlines()
        if "TORCH_SPEC ?=" in line
    )
    assert pin in install and "make TORCH_SPEC= " in install


def _undocumented_inputs(workflow: dict) -> list[str]:
    problems = []
    for job in workflow["jobs"].values():
        for step in job["steps"]:
            if "uses" not in step:
                continue
            action = step["uses"].split("@")[0]
            if action not in ACTION_INPUTS:
                problems.append(f"{action}: not in ACTION_INPUTS (add its documented inputs first)")
                continue
            problems += [
                f"{action}: no input {key!r}" for key in step.get("with", {}) if key not in ACTION_INPUTS[action]
            ]
    return problems


@pytest.mark.parametrize(
    "path", ["release:.github/workflows/classroom.yml", ".github/workflows/gpu-grade.yml", ".github/workflows/site.yml"]
)
def test_workflow_uses_only_documented_action_inputs(release, path):
    file = release / path.split(":", 1)[1] if path.startswith("release:") else ROOT / path
    workflow = yaml.safe_load(file.read_text())
    assert not _undocumented_inputs(workflow), _undocumented_inputs(workflow)


def test_undocumented_input_check_flags_an_unknown_input_and_an_unknown_action():
    workflow = {"jobs": {"j": {"steps": [{"uses": "actions/checkout@v4", "with": {"depth": 1}}, {"uses": "x/y@v1"}]}}}
    assert len(_undocumented_inputs(workflow)) == 2


def test_gpu_workflow_is_dispatched_by_hand_and_grades_on_cuda_keeping_the_runners_torch():
    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "gpu-grade.yml").read_text())
    inputs = workflow["on"]["workflow_dispatch"]["inputs"]
    assert {"submission", "ref", "modules"} <= inputs.keys() and inputs["submission"]["required"]
    (job,) = workflow["jobs"].values()
    assert job["runs-on"] == ["self-hosted", "gpu"]
    runs = "\n".join(s.get("run", "") for s in job["steps"])
    assert "make TORCH_SPEC= " in runs and "--system-site-packages" in runs
    assert "python -m grader grade $MODULES" in runs and "--device cuda" in runs
    checkouts = [s for s in job["steps"] if s.get("uses", "").startswith("actions/checkout@")]
    assert any(s.get("with", {}).get("repository") == "${{ inputs.submission }}" for s in checkouts)
    upload = next(s for s in job["steps"] if s.get("uses", "").startswith("actions/upload-artifact@"))
    assert upload["if"] == "always()"


def test_gpu_workflow_job_summary_renders_a_gradescope_report(tmp_path):
    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "gpu-grade.yml").read_text())
    (job,) = workflow["jobs"].values()
    summary = next(s for s in job["steps"] if "GITHUB_STEP_SUMMARY" in s.get("run", ""))
    tests = [
        TestResult("attention", "test_fast", "hidden", "passed", measurements={"leaderboard_ms": 6.5}),
        TestResult("attention", "test_right", "public", "failed", message="wrong | shape\nmore"),
    ]
    report = GradeReport("course", "sub", "cuda", [ModuleResult("attention", "A", 100, tests)])
    report.modules[0].assign_points()
    (tmp_path / "report").mkdir()
    (tmp_path / "report" / "results.json").write_text(render(report, "gradescope"))
    env = {**os.environ, "SUBMISSION": "student/repo", "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md")}
    completed = subprocess.run(["bash", "-c", summary["run"]], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert completed.returncode == 0, completed.stderr
    text = (tmp_path / "summary.md").read_text()
    assert "student/repo: 50 points" in text and "attention: leaderboard_ms = 6.5" in text
    assert "| attention: test_right | 0 / 50 | wrong \\| shape |" in text


def test_release_makefile_keeps_grade_and_drops_instructor_targets(release):
    makefile = (release / "Makefile").read_text()
    for target in INSTRUCTOR_TARGETS:
        assert not any(line.startswith(f"{target}:") for line in makefile.splitlines()), target
    assert "grade:" in makefile and "release" not in makefile.split(".PHONY:", 1)[1].splitlines()[0]
    dry_run = subprocess.run(["make", "-n", "grade"], cwd=release, capture_output=True, text=True)
    assert dry_run.returncode == 0 and "-m grader grade" in dry_run.stdout, dry_run.stderr


def test_release_refuses_an_out_folder_inside_the_repository_in_one_line():
    completed = run_grader("release", "--out", str(ROOT / "build" / "student"))
    assert completed.returncode == 2 and not (ROOT / "build" / "student").exists()
    assert completed.stderr.count("\n") == 1 and "inside the course repository" in completed.stderr


def test_release_refuses_a_non_empty_folder_and_forced_replaces_only_a_previous_release(tmp_path):
    course = load_course()
    (tmp_path / ".git").mkdir()
    (tmp_path / "notes.txt").write_text("not a release")
    with pytest.raises(UsageError, match="not empty"):
        write_release(course, tmp_path)
    with pytest.raises(UsageError, match="no previous release"):
        write_release(course, tmp_path, force=True)
    (tmp_path / "notes.txt").unlink()
    write_release(course, tmp_path)  # nothing but .git: a fresh clone
    (tmp_path / "stale.txt").write_text("from an earlier release")
    written = write_release(course, tmp_path, force=True)
    assert not (tmp_path / "stale.txt").exists() and (tmp_path / ".git").is_dir()
    assert {tmp_path / "README.md", tmp_path / "assignments" / "attention" / "test_attention.py"} <= set(written)
