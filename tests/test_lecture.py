"""Lectures stay true to the code: every function and section named in course.toml is in the
lecture, the figures the lecture embeds exist, and the figure scripts run."""

from __future__ import annotations

import json
import re
import subprocess
import sys
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
def run_figure_scripts(folder: Path) -> dict[str, tuple[int, str, Path]]:
    """Every figure script as `python SCRIPT --out DIR` runs it, into a folder of its own:
    (exit status, what it printed, the folder). tests/run_scripts.py forks each from one process
    that imports matplotlib and torch once, not once per script."""
    plan = []
    for script in SCRIPTS:
        out = folder / script.stem
        out.mkdir()
        plan.append({"script": str(script), "args": ["--out", str(out)], "log": str(folder / f"{script.stem}.log")})
    (folder / "plan.json").write_text(json.dumps(plan))
    command = [sys.executable, str(ROOT / "tests" / "run_scripts.py"), str(folder / "plan.json")]
    completed = subprocess.run(command, capture_output=True, text=True, timeout=900)
    assert completed.returncode == 0, f"tests/run_scripts.py failed:\n{completed.stderr[-3000:]}"
    codes = {Path(line["script"]).name: line["returncode"] for line in map(json.loads, completed.stdout.splitlines())}
    return {s.name: (codes[s.name], (folder / f"{s.stem}.log").read_text(), folder / s.stem) for s in SCRIPTS}


@pytest.fixture(scope="module")
def figures(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[int, str, Path]]:
    return run_figure_scripts(tmp_path_factory)


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_figure_script_runs(script, figures):
    returncode, printed, out = figures[script.name]
    assert returncode == 0, f"{script.name} exited {returncode}:\n{printed[-3000:]}"
    assert list(out.glob("*.png")), f"{script.name} wrote no figure"
