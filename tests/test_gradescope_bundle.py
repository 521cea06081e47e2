"""The Gradescope bundle (`python -m grader gradescope`): a zip with setup.sh and run_autograder
that grades a submission with the hidden suites and writes results.json, here run against a
temporary folder laid out like /autograder."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import ROOT, run_grader

from grader.course import load_course
from grader.delivery.gradescope_bundle import gather_submission, with_hidden_visibility
from grader.report import render
from grader.results import GradeReport, ModuleResult, TestResult
from grader.usage import UsageError

MODULE = "quantization"  # the cheapest module to grade in full (public tests + hidden suite)


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("bundle") / "autograder.zip"
    completed = run_grader("gradescope", "--out", str(out), timeout=120)
    assert completed.returncode == 0, f"gradescope failed:\n{completed.stderr[-2000:]}"
    return out


def test_bundle_has_executable_scripts_at_its_root_and_no_solutions(bundle):
    with zipfile.ZipFile(bundle) as archive:
        names = archive.namelist()
        for script in ("setup.sh", "run_autograder"):
            assert script in names, f"Gradescope needs {script} at the zip's root"
            assert archive.getinfo(script).external_attr >> 16 & 0o111, f"{script} must be executable"
        setup = archive.read("setup.sh").decode()
    assert not [n for n in names if n.startswith(("solutions/", "course/solutions/", "course/tests/"))]
    assert "course/grader/suites/quantization/test_quantization_integer.py" in names, "the hidden suites"
    makefile = (ROOT / "Makefile").read_text().splitlines()
    pin = next(line.split("=", 1)[1].strip() for line in makefile if line.startswith("TORCH_SPEC ?="))
    assert f'"{pin}" --index-url https://download.pytorch.org/whl/cpu' in setup, "CPU torch pinned as in the Makefile"
    syntax = subprocess.run(["bash", "-n", "-c", setup], capture_output=True, text=True)
    assert syntax.returncode == 0, syntax.stderr


def test_run_autograder_grades_a_tree_submission_with_hidden_tests_after_the_due_date(bundle, tmp_path):
    """The reference, whose copy of a given helper (scale_rows) was rewritten to raise, gets full
    marks: the bundle ships the pristine stubs the grader re-installs given code from."""
    root = tmp_path / "autograder"
    with zipfile.ZipFile(bundle) as archive:
        archive.extractall(root / "source")
    shutil.copytree(ROOT / "solutions" / MODULE, root / "submission" / "assignments" / MODULE)
    with open(root / "submission" / "assignments" / MODULE / "integer.py", "a") as integer:
        integer.write("\n\ndef scale_rows(*args, **kwargs):\n    raise RuntimeError('a rewritten given helper ran')\n")
    (root / "submission" / "README.md").write_text("my repository")
    env = {**os.environ, "AUTOGRADER_ROOT": str(root), "GRADER_MODULES": MODULE, "GRADER_PYTHON": sys.executable}
    completed = subprocess.run(
        ["bash", str(root / "source" / "run_autograder")], env=env, capture_output=True, text=True, timeout=600
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    results = json.loads((root / "results" / "results.json").read_text())
    failed = [t["name"] for t in results["tests"] if t["status"] != "passed"]
    assert results["score"] == 100 and not failed, failed
    suites = {t["extra_data"]["suite"]: t["visibility"] for t in results["tests"]}
    assert suites == {"public": "visible", "hidden": "after_due_date"}
    assert all(t["name"].startswith(f"{MODULE}: ") for t in results["tests"])
    assert "README.md" in results["output"] and "not graded" in results["output"]
    assert "leaderboard" not in results, "a CPU run has no leaderboard"


def test_flat_upload_maps_files_to_modules_and_reports_missing_and_unrecognised_files(tmp_path):
    course = load_course()
    upload = tmp_path / "upload"
    upload.mkdir()
    files = course.module(MODULE).files
    for file in files[1:]:
        shutil.copy(ROOT / "solutions" / MODULE / file, upload / file)
    (upload / "notes.txt").write_text("thoughts")
    (upload / "__MACOSX").mkdir()
    (upload / "__MACOSX" / "._nf4.py").write_text("resource fork")
    notes = gather_submission(course, upload, [MODULE], tmp_path / "graded")
    for file in files[1:]:
        assert (tmp_path / "graded" / MODULE / file).read_text() == (ROOT / "solutions" / MODULE / file).read_text()
    stub = (tmp_path / "graded" / MODULE / files[0]).read_text()
    assert "raise NotImplementedError" in stub, "a missing file is graded as its stub"
    assert any(f"{MODULE}/{files[0]} is missing" in n for n in notes), notes
    assert any("notes.txt" in n and "not graded" in n for n in notes), notes
    assert not any("MACOSX" in n for n in notes), notes


def test_a_file_in_its_module_folder_wins_over_a_loose_copy_and_the_choice_is_reported(tmp_path):
    course = load_course()
    file = course.module(MODULE).files[0]
    (tmp_path / "up" / MODULE).mkdir(parents=True)
    (tmp_path / "up" / file).write_text("LOOSE = 1\n")
    (tmp_path / "up" / MODULE / file).write_text("IN_FOLDER = 1\n")
    notes = gather_submission(course, tmp_path / "up", [MODULE], tmp_path / "graded")
    assert (tmp_path / "graded" / MODULE / file).read_text() == "IN_FOLDER = 1\n"
    assert any("several files" in n and f"graded {MODULE}/{file}" in n for n in notes), notes


def test_hidden_visibility_is_set_in_the_bundled_course_toml():
    text = (ROOT / "course.toml").read_text()
    assert 'hidden_visibility = "after_due_date"' in with_hidden_visibility(text, "after_due_date")
    assert 'hidden_visibility = "hidden"' in with_hidden_visibility("[course]\ntitle = 't'\n", "hidden")


def test_leaderboard_holds_gpu_timings_only_from_a_gpu_run():
    def report(device: str) -> dict:
        tests = [
            TestResult("attention", "test_board", "hidden", "passed", measurements={"leaderboard_ms": 5.4, "x": 1}),
            TestResult("attention", "test_ratio", "hidden", "passed", measurements={"time_ratio_vs_sdpa": 1.2}),
        ]
        graded = GradeReport("course", "sub", device, [ModuleResult("attention", "A", 100, tests)])
        graded.modules[0].assign_points()
        return json.loads(render(graded, "gradescope"))

    assert report("cuda")["leaderboard"] == [{"name": "attention: leaderboard_ms", "value": 5.4, "order": "asc"}]
    assert "leaderboard" not in report("cpu")


def test_gradescope_refuses_an_unknown_module_or_a_folder_as_out_in_one_line(tmp_path):
    unknown = run_grader("gradescope", "no_such_module", "--out", str(tmp_path / "a.zip"))
    assert unknown.returncode == 2 and unknown.stderr.count("\n") == 1 and "no_such_module" in unknown.stderr
    folder = run_grader("gradescope", "--out", str(tmp_path))
    assert folder.returncode == 2 and folder.stderr.count("\n") == 1 and "is a folder" in folder.stderr
    assert not (tmp_path / "a.zip").exists()


def test_hidden_visibility_is_refused_when_the_setting_found_is_not_the_defaults_one():
    with pytest.raises(UsageError, match="hidden_visibility"):
        with_hidden_visibility('[x]\nhidden_visibility = 1\n[defaults]\nhidden_visibility = "visible"\n', "hidden")
