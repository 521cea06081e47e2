"""The website's notebook pages: each module's notebook, executed against the reference
solutions as the project's tests execute it (tests/test_notebook.py), rendered to Markdown.

Executing is the slow part of the build (each notebook starts a kernel and the grader's
workers), so it runs two notebooks at a time, each in a process of its own; the command can
also take notebooks already executed elsewhere (`--executed DIR`) or render them without
outputs (`--no-execute`). The rendered cells are the notebook's own (the student's copy), and
the outputs are what the reference printed and plotted.
"""

from __future__ import annotations

import base64
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from grader.course import Course
from grader.usage import UsageError

AT_ONCE = 2  # notebooks executed together: each mostly waits on its kernel and workers starting
TIMEOUT_S = 600  # one notebook, whole
# The same execution as tests/test_notebook.py: nbclient, the kernel in the notebook's folder.
EXECUTE = """
import sys, nbclient, nbformat
notebook = nbformat.read(sys.argv[1], as_version=4)
resources = {"metadata": {"path": sys.argv[2]}}
nbclient.NotebookClient(notebook, timeout=300, kernel_name="python3", resources=resources).execute()
nbformat.write(notebook, sys.argv[3])
"""
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def notebook_path(course: Course, module: str) -> Path:
    return course.public_tests(module) / f"{module}.ipynb"


def _execute(course: Course, module: str, out: Path) -> Path:
    """Run one notebook with its kernel grading the reference (GRADER_SUBMISSION=solutions/)."""
    path = notebook_path(course, module)
    target = out / f"{module}.ipynb"
    env = {**os.environ, "GRADER_SUBMISSION": str(course.root / "solutions")}
    command = [sys.executable, "-c", EXECUTE, str(path), str(path.parent), str(target)]
    completed = subprocess.run(command, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    if completed.returncode != 0:
        raise UsageError(f"the {module} notebook failed against the solutions:\n{completed.stderr[-2000:]}")
    return target


def execute_notebooks(course: Course, out: Path) -> dict[str, Path]:
    """Every module's notebook executed into `out`, AT_ONCE at a time; module -> executed file."""
    if not (course.root / "solutions").is_dir():
        raise UsageError("executing the notebooks needs solutions/ (or pass --executed DIR or --no-execute)")
    out.mkdir(parents=True, exist_ok=True)
    modules = list(course.modules)
    with ThreadPoolExecutor(max_workers=AT_ONCE) as pool:
        return dict(zip(modules, pool.map(lambda m: _execute(course, m, out), modules)))


def executed_notebooks(course: Course, folder: Path) -> dict[str, Path]:
    """Notebooks executed elsewhere: `folder`/<module>.ipynb for every module."""
    found = {m: folder / f"{m}.ipynb" for m in course.modules}
    missing = [str(path) for path in found.values() if not path.is_file()]
    if missing:
        raise UsageError(f"--executed {folder}: no {', '.join(missing)}")
    return found


# ---- Rendering ----------------------------------------------------------------------------------


def _fenced(text: str, language: str) -> list[str]:
    """`text` in a fenced code block longer than any run of backticks it holds."""
    runs = re.findall(r"`+", text)
    fence = "`" * max(3, *(len(run) + 1 for run in runs)) if runs else "```"
    return [f"{fence}{language}", text.rstrip("\n"), fence, ""]


def _output(output: dict, image_name: str, images: Path) -> list[str]:
    """Markdown for one cell output; an image is written to `images`/`image_name`."""
    kind = output["output_type"]
    if kind == "stream":
        return _fenced(ANSI.sub("", "".join(output["text"])), "text")
    if kind == "error":
        return _fenced(ANSI.sub("", "\n".join(output["traceback"])), "text")
    data = output.get("data", {})
    if "image/png" in data:
        images.mkdir(parents=True, exist_ok=True)
        (images / image_name).write_bytes(base64.b64decode(data["image/png"]))
        alt = "".join(data.get("text/plain", "a figure")).strip("<>")
        return [f"![{alt}]({images.name}/{image_name})", ""]
    if "text/plain" in data:
        return _fenced(ANSI.sub("", "".join(data["text/plain"])), "text")
    return []  # other kinds (widgets, HTML) do not occur in the course's notebooks


def notebook_page(module: str, notebook: dict, images: Path, executed: bool) -> str:
    """The Markdown of a notebook's page: its markdown cells as they are, its code cells as
    Python blocks, each followed by its outputs (figures written into `images`). A note under
    the first markdown cell (the notebook's title and introduction) says what the page shows."""
    source = f"assignments/{module}/{module}.ipynb"
    if executed:
        note = f"This is `{source}` executed against the course's reference solutions when this site was built."
    else:
        note = f"This is `{source}`, shown without outputs (the site was built with `--no-execute`)."
    lines: list[str] = []
    noted = False
    for index, cell in enumerate(notebook["cells"]):
        text = "".join(cell["source"])
        if cell["cell_type"] == "markdown":
            lines += [text, ""]
            if not noted:
                lines += [f'!!! note "The {module} notebook"', "", f"    {note} `make lab` runs it on your code.", ""]
                noted = True
        elif cell["cell_type"] == "code" and text.strip():
            lines += _fenced(text, "python")
            outputs = cell.get("outputs", []) if executed else []
            shown = [line for n, out in enumerate(outputs) for line in _output(out, f"cell{index}_{n}.png", images)]
            if shown:  # set apart from the code above them (site.css)
                lines += ['<div class="nb-output" markdown>', "", *shown, "</div>", ""]
    return "\n".join(lines) + "\n"
