"""Lectures stay true to the code: every function and section named in course.toml is in the
lecture, the figures the lecture embeds exist, and the figure scripts run."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from conftest import ROOT

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


@pytest.mark.parametrize("script", sorted((ROOT / "lectures" / "scripts").glob("*_figures.py")), ids=lambda p: p.name)
def test_figure_script_runs(script, tmp_path):
    completed = subprocess.run(
        [sys.executable, str(script), "--out", str(tmp_path)], capture_output=True, text=True, timeout=120
    )
    assert completed.returncode == 0, completed.stderr
    assert list(tmp_path.glob("*.png"))
