"""The module notebooks execute top to bottom against the reference solutions."""

from __future__ import annotations

import os

import nbclient
import nbformat
import pytest
from conftest import ROOT

from grader.course import load_course


@pytest.mark.parametrize("module", list(load_course().modules))
def test_notebook_runs_against_the_solutions(module, monkeypatch):
    path = ROOT / "assignments" / module / f"{module}.ipynb"
    notebook = nbformat.read(path, as_version=4)
    assert all(not cell.get("outputs") for cell in notebook.cells if cell.cell_type == "code"), (
        f"{path} is committed with outputs; clear them"
    )
    monkeypatch.setenv("GRADER_SUBMISSION", str(ROOT / "solutions"))
    client = nbclient.NotebookClient(
        notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    )
    client.execute()
    errors = [o for c in notebook.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors, errors
    assert os.environ["GRADER_SUBMISSION"].endswith("solutions")


@pytest.mark.parametrize("module", list(load_course().modules))
def test_notebook_is_what_its_generator_script_writes(module, tmp_path):
    """A notebook with a generator script (lectures/scripts/make_<m>_notebook.py) is not edited
    by hand: the committed file must be exactly what the script writes."""
    import subprocess
    import sys

    script = ROOT / "lectures" / "scripts" / f"make_{module}_notebook.py"
    if not script.is_file():
        pytest.skip(f"{module}'s notebook has no generator script")
    out = tmp_path / f"{module}.ipynb"
    subprocess.run([sys.executable, str(script), "--out", str(out)], check=True, capture_output=True)
    committed = ROOT / "assignments" / module / f"{module}.ipynb"
    assert out.read_text() == committed.read_text(), f"regenerate it: python {script.relative_to(ROOT)}"
