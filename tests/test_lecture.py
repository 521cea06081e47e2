"""Lectures stay true to the code: every function and section named in course.toml is in the
lecture, the figures the lecture embeds exist, and the figure scripts run."""

from __future__ import annotations

import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from conftest import ROOT, prefetched

from grader.course import load_course

MODULES = list(load_course().modules.values())


@pytest.mark.parametrize("module", MODULES, ids=[m.name for m in MODULES])
def test_lecture_has_every_section_and_function_of_the_syllabus(module):
    text = (ROOT / module.lecture).read_text()
    headings = set(re.findall(r"^## (.+)$", text, flags=re.MULTILINE))
    for function in module.functions.values():
        assert function.section in headings, f"{module.lecture} lacks section {function.section!r}"
        assert f"`{function.name}" in text, f"{module.lecture} never mentions {function.name}"


@pytest.mark.parametrize("module", MODULES, ids=[m.name for m in MODULES])
def test_lecture_figures_exist(module):
    text = (ROOT / module.lecture).read_text()
    for figure in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text):
        assert (ROOT / module.lecture).parent.joinpath(figure).is_file(), f"missing figure {figure}"


SCRIPTS = sorted((ROOT / "lectures" / "scripts").glob("*_figures.py"))


@prefetched
def run_figure_scripts(folder: Path) -> dict[str, tuple[subprocess.CompletedProcess, Path]]:
    """Every figure script, writing into a folder of its own, two at a time."""

    def run(script: Path) -> tuple[subprocess.CompletedProcess, Path]:
        out = folder / script.stem
        out.mkdir()
        command = [sys.executable, str(script), "--out", str(out)]
        return subprocess.run(command, capture_output=True, text=True, timeout=120), out

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(zip((s.name for s in SCRIPTS), pool.map(run, SCRIPTS)))


@pytest.fixture(scope="module")
def figures(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[subprocess.CompletedProcess, Path]]:
    return run_figure_scripts(tmp_path_factory)


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_figure_script_runs(script, figures):
    completed, out = figures[script.name]
    assert completed.returncode == 0, completed.stderr
    assert list(out.glob("*.png"))
