"""The website must never show solution code: every line written between `### BEGIN SOLUTION`
and `### END SOLUTION` in solutions/ is looked for in the text of every built page (and the
search index, which holds the same text), and the build is refused when one turns up.

Two kinds of lines say nothing about where they came from, and are not looked for:
- short ones (`return out`, `else:`), under MIN_CHARS characters;
- lines the course already publishes in its student-facing sources (a lecture's code example,
  a stub's given code, a notebook cell): those are in every student's copy anyway.
"""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path

from grader.course import Course
from grader.sync import BEGIN, END

MIN_CHARS = 20


def solution_lines(root: Path) -> dict[str, str]:
    """Every code line inside a fenced region of solutions/**/*.py (stripped; blank lines and
    comments left out), mapped to the file it comes from."""
    found: dict[str, str] = {}
    for path in sorted((root / "solutions").rglob("*.py")):
        inside = False
        for line in path.read_text().splitlines():
            stripped = line.strip()
            if stripped == BEGIN:
                inside = True
            elif stripped == END:
                inside = False
            elif inside and stripped and not stripped.startswith("#"):
                found.setdefault(stripped, str(path.relative_to(root)))
    return found


def _published_text(course: Course) -> str:
    """The student-facing sources, whose lines are no secret: lectures and assignments/."""
    root = course.root
    paths = [*sorted((root / "lectures").glob("*.md")), *sorted((root / "assignments").rglob("*"))]
    texts = []
    for path in paths:
        if path.suffix == ".ipynb":  # the cells' sources, not their JSON-escaped strings
            texts += ["".join(cell["source"]) for cell in json.loads(path.read_text())["cells"]]
        elif path.is_file() and path.suffix in (".md", ".py"):
            texts.append(path.read_text())
    return _normalized("\n".join(texts))


def secret_lines(course: Course) -> dict[str, str]:
    """The solution lines that must not appear in the site (see the module's docstring)."""
    published = _published_text(course)
    return {
        line: origin
        for line, origin in solution_lines(course.root).items()
        if len(line) >= MIN_CHARS and _normalized(line) not in published
    }


def _normalized(text: str) -> str:
    """Runs of whitespace made one space: the page's text and the source line then compare
    however the page wrapped or indented them."""
    return " ".join(text.split())


class _TextOf(HTMLParser):
    """The text a page shows (and scripts hold), without the markup: syntax highlighting
    splits a line of code into many <span>s, and its text is the line again."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []

    def handle_data(self, data: str) -> None:
        self.parts.append(data)


def page_text(path: Path) -> str:
    """The text of a built page: an HTML page's text, or the search index's entries."""
    raw = path.read_text(errors="replace")
    if path.suffix == ".json":
        entries = json.loads(raw).get("docs", [])
        raw = "\n".join(f"{e.get('title', '')}\n{e.get('text', '')}" for e in entries)
    parser = _TextOf()
    parser.feed(raw)
    parser.close()
    return _normalized("".join(parser.parts))


def leaks(site: Path, secrets: dict[str, str]) -> list[str]:
    """Where a secret line shows in the built `site`: one "page: line (origin)" per finding."""
    found = []
    pages = [*sorted(site.rglob("*.html")), *sorted(site.rglob("search_index.json"))]
    for page in pages:
        text = page_text(page)
        for line, origin in secrets.items():
            if _normalized(line) in text:
                found.append(f"{page.relative_to(site)}: {line!r} (from {origin})")
    return found
