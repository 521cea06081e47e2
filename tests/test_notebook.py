"""The module notebooks execute top to bottom against the reference solutions."""

from __future__ import annotations

import asyncio
import difflib
import json
import os
from pathlib import Path

import jupytext
import nbclient
import nbformat
import pytest
from conftest import ROOT, prefetched

from grader.course import load_course

MODULES = list(load_course().modules)
TORCH_CACHES = ("torchinductor_",)  # torch's compile cache, kept on purpose
AT_ONCE = 2  # notebooks executed together: each mostly waits on its kernel and workers starting


async def _execute(module: str, folder: Path, at_once: asyncio.Semaphore) -> tuple[str, Path, list[str]]:
    """Run assignments/<module>/<module>.ipynb with nbclient in a kernel of its own, grading
    against the solutions; (what went wrong, or "", the executed notebook, what the kernel left
    in its TMPDIR once shut down)."""
    path = ROOT / "assignments" / module / f"{module}.ipynb"
    out = folder / f"{module}.ipynb"
    temporary = folder / f"{module}-tmp"
    temporary.mkdir()
    notebook = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    )
    failure = ""
    async with at_once:
        try:
            await client.async_execute(
                env={**os.environ, "GRADER_SUBMISSION": str(ROOT / "solutions"), "TMPDIR": str(temporary)}
            )
        except Exception as error:  # a cell's error, a dead kernel or a timeout: the test shows it
            failure = f"{type(error).__name__}: {error}"[-3000:]
    nbformat.write(notebook, out)
    left = sorted(p.name for p in temporary.iterdir() if not p.name.startswith(TORCH_CACHES))
    return failure, out, left


@prefetched
def execute_every_notebook(folder: Path) -> dict[str, tuple[str, Path, list[str]]]:
    """Every notebook, AT_ONCE at a time, driven from this process (one event loop, a kernel
    process per notebook), not from a Python process of its own per notebook."""

    async def every() -> list[tuple[str, Path, list[str]]]:
        at_once = asyncio.Semaphore(AT_ONCE)
        return await asyncio.gather(*(_execute(module, folder, at_once) for module in MODULES))

    return dict(zip(MODULES, asyncio.run(every())))


@pytest.fixture(scope="module")
def executed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, Path, list[str]]]:
    return execute_every_notebook(tmp_path_factory)


@pytest.mark.parametrize("module", MODULES)
def test_notebook_runs_against_the_solutions(module, executed):
    path = ROOT / "assignments" / module / f"{module}.ipynb"
    committed = nbformat.read(path, as_version=4)
    assert all(not cell.get("outputs") for cell in committed.cells if cell.cell_type == "code"), (
        f"{path} is committed with outputs; clear them"
    )
    failure, out, left = executed[module]
    assert not failure, failure
    assert not left, (
        f"the kernel left {left} in its temporary folder: it was killed at shutdown before its atexit "
        "handlers ran (a zombie child process holds ipykernel's shutdown), or the notebook does not clean up"
    )
    notebook = json.loads(out.read_text())
    errors = [o for c in notebook["cells"] for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors, errors
    assert sum(bool(c.get("outputs")) for c in notebook["cells"]) > 0, "no cell produced output"


@pytest.mark.parametrize("module", MODULES)
def test_notebook_and_its_text_source_are_in_sync(module):
    """Each notebook's source of truth is its MyST text twin (assignments/<m>/<m>.md), paired
    with the .ipynb by jupytext: both, written by jupytext as md:myst, are the same text (what
    `jupytext --diff --diff-format md:myst` compares, here in this process)."""
    folder = ROOT / "assignments" / module
    text, notebook = folder / f"{module}.md", folder / f"{module}.ipynb"
    assert text.is_file(), f"{text.relative_to(ROOT)} is missing: jupytext --set-formats ipynb,md:myst {notebook}"
    as_text = [jupytext.writes(jupytext.read(path), fmt="md:myst").splitlines() for path in (notebook, text)]
    diff = "\n".join(difflib.unified_diff(*as_text, str(notebook.name), str(text.name), lineterm=""))
    assert not diff, (
        f"{notebook.relative_to(ROOT)} and {text.name} differ: edit the .md, then "
        f"`jupytext --sync {text.relative_to(ROOT)}`\n{diff[:3000]}"
    )
    paired = nbformat.read(notebook, as_version=4).metadata.get("jupytext", {}).get("formats")
    assert paired == "ipynb,md:myst", f"{notebook.name} is not paired with its .md (formats: {paired!r})"
