"""Building a module's notebook from a script: cells with stable ids, no outputs, so that
regenerating gives the same file and a diff shows only what changed in the text.

    notebook = Notebook("collectives")
    md, code = notebook.md, notebook.code
    md("intro", '''# Title ...''')
    code("setup", '''import torch''')
    if __name__ == "__main__":
        notebook.main(__doc__)   # writes assignments/collectives/collectives.ipynb (or --out PATH)
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from textwrap import dedent

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

REPO = Path(__file__).resolve().parents[2]


class Notebook:
    """The cells of one module's notebook, in order."""

    def __init__(self, module: str) -> None:
        self.default_out = REPO / "assignments" / module / f"{module}.ipynb"
        self.cells: list[tuple[str, str, str]] = []  # (kind, id, source)

    def _add(self, kind: str, cell_id: str, text: str) -> None:
        if not re.fullmatch(r"[a-z0-9-]+", cell_id):
            raise ValueError(f"bad cell id {cell_id!r}: use lowercase letters, digits and dashes")
        if any(cell_id == existing for _, existing, _ in self.cells):
            raise ValueError(f"duplicate cell id {cell_id!r}")
        self.cells.append((kind, cell_id, dedent(text).strip()))

    def md(self, cell_id: str, text: str) -> None:
        self._add("markdown", cell_id, text)

    def code(self, cell_id: str, text: str) -> None:
        self._add("code", cell_id, text)

    def build(self) -> nbformat.NotebookNode:
        cells = [
            (new_code_cell if kind == "code" else new_markdown_cell)(source=source, id=cell_id)
            for kind, cell_id, source in self.cells
        ]
        notebook = new_notebook(cells=cells)
        notebook.metadata = {
            "kernelspec": {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"},
            "language_info": {"name": "python"},
        }
        nbformat.validate(notebook)
        return notebook

    def main(self, description: str | None) -> None:
        parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
        parser.add_argument("--out", type=Path, default=self.default_out)
        out = parser.parse_args().out
        out.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(self.build(), out)
        print(f"wrote {out}")
