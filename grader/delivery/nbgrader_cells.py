"""The cells `python -m grader nbgrader` adds to a module notebook, and the autograde step that
keeps a submitted notebook to the course's own cells.

Imported by the course's nbgrader_config.py (which nbgrader loads) and by the build; never by
the notebook kernel.
"""

from __future__ import annotations

from typing import Any

from nbformat.notebooknode import NotebookNode
from nbgrader.preprocessors import NbGraderPreprocessor

INTRO = """## Grading

The cells below are graded by nbgrader: each runs one group of the course's checks (the public
tests, or one part of the hidden suite) against the `.py` files in this folder, in the same
sandboxed workers as `make grade`, and shows which checks passed and why the others failed.
There is nothing to edit here: your work is the `.py` files."""

GRADED = """# {what}: {points:g} points, in proportion to the checks that pass.
from grader.delivery.nbgrader_course import grade_cell

grade_cell({module!r}, {group!r}, {points!r})"""


def nbgrader_metadata(grade_id: str, points: float | None = None) -> dict[str, Any]:
    """nbgrader (schema 3) metadata of a read-only cell; a graded one when `points` is given.

    Read-only cells are restored from the gradebook at autograde, so a student's edit to one
    never runs there.
    """
    metadata: dict[str, Any] = {
        "grade": points is not None,
        "grade_id": grade_id,
        "locked": True,
        "schema_version": 3,
        "solution": False,
        "task": False,
    }
    if points is not None:
        metadata["points"] = points
    return metadata


class CourseCellsOnly(NbGraderPreprocessor):
    """Autograde step: drop every cell that is not one of the course's (a cell the student added).

    The course's cells carry a grade id that the gradebook knows (OverwriteCells, which runs
    first, has restored their source and removed unknown ids). Student code then runs only in
    the grader's workers, never in the kernel that prints the scores, so no cell of theirs can
    patch the grading call before it runs.
    """

    def preprocess(self, nb: NotebookNode, resources: dict[str, Any]) -> tuple[NotebookNode, dict[str, Any]]:
        kept = [cell for cell in nb.cells if cell.metadata.get("nbgrader", {}).get("grade_id")]
        if len(kept) < len(nb.cells):
            self.log.warning("Not running %d cell(s) added by the student", len(nb.cells) - len(kept))
        nb.cells = kept
        return nb, resources
