"""`python -m grader site --out site`: the course as a website, built with MkDocs and the
Material for MkDocs theme (`make site`).

The command writes a MkDocs project generated from the course's sources into a work folder
(build/site-src/ by default), builds it, checks that no page holds solution code, and only then
replaces `--out` with it. The pages:

- Home: the syllabus from course.toml, with links to every lecture, notebook and API page;
- Getting started: the two commands, how grading works, the grader's real output;
- Lectures: lectures/*.md with their figures, math typeset by KaTeX (served by the site, no
  CDN), links from what each lecture teaches to its API entry;
- Notebooks: each module's notebook executed against the reference solutions (the slow part:
  `--executed DIR` takes notebooks executed elsewhere, `--no-execute` renders them without
  outputs and runs nothing, not even the grader for Getting started);
- API: signatures and docstrings of the student's functions and classes, read from the stubs
  in assignments/ with `ast`;
- Instructors: README's instructor and course-runner sections;
- Search: Material's built-in search (it runs in the browser, offline).

Instructor-only: a student's release ships only grader/delivery/__init__.py, not this command.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from grader.course import Course
from grader.usage import UsageError

HELP = "build the course website (MkDocs + Material) into --out DIR (default: site)"

TEMPLATES = Path(__file__).resolve().parent / "templates" / "site"
MARKER = Path("search") / "search_index.json"  # every build has it: --out may replace a folder holding it
GRADE_TIMEOUT_S = 600


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", default="site", metavar="DIR", help="the built site (default: site)")
    parser.add_argument(
        "--work", default="build/site-src", metavar="DIR", help="the generated MkDocs project (default: build/site-src)"
    )
    notebooks = parser.add_mutually_exclusive_group()
    notebooks.add_argument("--executed", metavar="DIR", help="take executed notebooks (<module>.ipynb) from DIR")
    notebooks.add_argument(
        "--no-execute", action="store_true", help="run nothing: notebooks without outputs, no grader output"
    )


def run(course: Course, options: argparse.Namespace) -> int:
    start = time.monotonic()
    out = Path(options.out).resolve()
    executed = Path(options.executed).resolve() if options.executed else None
    pages = build_site(course, out, Path(options.work).resolve(), executed=executed, execute=not options.no_execute)
    size = sum(path.stat().st_size for path in out.rglob("*") if path.is_file())
    print(f"built {len(pages)} pages ({size / 1e6:.1f} MB) into {out} in {time.monotonic() - start:.0f} s")
    return 0


def build_site(
    course: Course, out: Path, work: Path, *, executed: Path | None = None, execute: bool = True
) -> list[Path]:
    """Generate the MkDocs project into `work`, build it, and publish it to `out` unless a page
    holds solution code; return the built HTML pages. `executed`: a folder of notebooks already
    executed; `execute=False`: run nothing (no notebook, no grading)."""
    from grader.delivery.site_leaks import leaks, secret_lines

    _check_out(course, out, work)
    docs = work / "docs"
    if docs.exists():
        shutil.rmtree(docs)
    docs.mkdir(parents=True)

    if not execute:
        notebooks, boards = None, (None, None)
    else:
        with ThreadPoolExecutor(max_workers=1) as background:  # the grader runs while notebooks do
            pending = background.submit(scoreboards, course)
            notebooks = _notebooks(course, work, executed)
            boards = pending.result()
    nav = _write_pages(course, docs, notebooks, boards)
    _write_assets(course, docs)
    config = work / "mkdocs.yml"
    config.write_text(_mkdocs_yml(course, nav))

    staging = work / "site"
    _mkdocs_build(config, staging)
    found = leaks(staging, secret_lines(course))
    if found:
        raise UsageError("refusing to publish the site: solution code in " + "; ".join(found[:5]))
    if out.exists():
        shutil.rmtree(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(str(staging), out)
    return sorted(out.rglob("*.html"))


def _check_out(course: Course, out: Path, work: Path) -> None:
    """`out` is replaced whole: refuse the repository itself, a folder holding it or the work
    folder (or inside it), and a non-empty folder that is not a previous build of the site."""
    root = course.root.resolve()
    if root.is_relative_to(out):
        raise UsageError(f"--out {out} holds the course repository; choose a folder of its own (e.g. site)")
    if work.is_relative_to(out) or out.is_relative_to(work):
        raise UsageError(f"--out {out} and --work {work} must be apart: one is inside the other")
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not (out / MARKER).is_file())):
        raise UsageError(f"--out {out} exists and is not a previous build of the site ({MARKER} is missing)")


def _notebooks(course: Course, work: Path, executed: Path | None) -> dict[str, Path]:
    from grader.delivery.site_notebooks import execute_notebooks, executed_notebooks

    if executed is not None:
        return executed_notebooks(course, executed)
    return execute_notebooks(course, work / "executed")


# ---- The grader's real output for Getting started -----------------------------------------------


def scoreboards(course: Course) -> tuple[str, str]:
    """What `python -m grader grade <first module> --no-perf` prints on the stubs, and on the
    stubs with the module's last file replaced by the reference's (a partial score)."""
    module = next(iter(course.modules.values()))
    stubs = _grade_text(course, course.root, module.name)
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch) / "assignments" / module.name
        shutil.copytree(course.public_tests(module.name), folder)
        shutil.copy2(course.root / "solutions" / module.name / module.files[-1], folder / module.files[-1])
        partial = _grade_text(course, Path(scratch), module.name)
    return stubs, partial


def _grade_text(course: Course, cwd: Path, module: str) -> str:
    """The text scoreboard of grading `cwd`/assignments, run as a student runs it (the
    submission is called `assignments` in what it prints)."""
    command = [sys.executable, "-m", "grader", "grade", module, "--no-perf", "--submission", "assignments"]
    env = {**os.environ, "PYTHONPATH": str(course.root)}
    completed = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=GRADE_TIMEOUT_S)
    if completed.returncode != 0:
        raise UsageError(f"grading {module} for the Getting started page failed:\n{completed.stderr[-2000:]}")
    return completed.stdout


# ---- The MkDocs project -------------------------------------------------------------------------


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _write_pages(
    course: Course, docs: Path, notebooks: dict[str, Path] | None, boards: tuple[str | None, str | None]
) -> list:
    """Write every page into `docs`; return MkDocs' nav for them."""
    from grader.delivery.site_api import api_page
    from grader.delivery.site_notebooks import notebook_page, notebook_path
    from grader.delivery.site_pages import (
        exercises,
        getting_started_page,
        home_page,
        instructors_page,
        lecture_page,
    )

    root = course.root
    readme = (root / "README.md").read_text()
    _write(docs / "index.md", home_page(course, readme))
    _write(docs / "getting-started.md", getting_started_page(course, *boards))
    _write(docs / "instructors.md", instructors_page(readme))
    shutil.copytree(root / "lectures" / "figures", docs / "lectures" / "figures")

    lectures, notebook_nav, api_nav = [], [], []
    for number, module in enumerate(course.modules.values(), start=1):
        _write(docs / module.lecture, lecture_page(course, module, (root / module.lecture).read_text()))
        lectures.append({f"{number}. {module.title.split(':')[0]}": module.lecture})

        sections = {e.entry.name: (e.section, e.link) for e in exercises(course, module)}
        _write(docs / "api" / f"{module.name}.md", api_page(course, module, sections))
        api_nav.append({module.name: f"api/{module.name}.md"})

        source = notebooks[module.name] if notebooks else notebook_path(course, module.name)
        notebook = json.loads(source.read_text())
        images = docs / "notebooks" / f"{module.name}_files"
        page = notebook_page(module.name, notebook, images, executed=notebooks is not None)
        _write(docs / "notebooks" / f"{module.name}.md", page)
        notebook_nav.append({module.name: f"notebooks/{module.name}.md"})
    return [
        {"Home": "index.md"},
        {"Getting started": "getting-started.md"},
        {"Lectures": lectures},
        {"Notebooks": notebook_nav},
        {"API": api_nav},
        {"Instructors": "instructors.md"},
    ]


def _write_assets(course: Course, docs: Path) -> None:
    """KaTeX (fetched once into build/, see site_katex.py), the script that typesets the math
    with it, and the site's few styles."""
    from grader.delivery.site_katex import copy_katex

    assets = docs / "assets"
    copy_katex(course.root / "build" / "katex", assets / "katex")
    for name in ("typeset.js", "site.css"):
        shutil.copy2(TEMPLATES / name, assets / name)


def _mkdocs_yml(course: Course, nav: list) -> str:
    import yaml

    config = {
        "site_name": course.title,
        "site_description": "A runnable, autograded course on AI infrastructure",
        "docs_dir": "docs",
        "use_directory_urls": False,  # page.html, not page/: the files open from disk too
        "theme": {
            "name": "material",
            "font": False,  # the system's fonts: Google Fonts would need the network
            "features": ["navigation.sections", "navigation.top", "search.highlight", "content.code.copy"],
        },
        "markdown_extensions": [
            {"toc": {"permalink": True}},
            "admonition",
            "attr_list",
            "tables",
            "md_in_html",
            {"pymdownx.arithmatex": {"generic": True}},  # math marked up for KaTeX, not MathJax
            "pymdownx.highlight",
            "pymdownx.superfences",
        ],
        "extra_css": ["assets/katex/katex.min.css", "assets/site.css"],
        "extra_javascript": ["assets/katex/katex.min.js", "assets/typeset.js"],
        "plugins": ["search"],
        "nav": nav,
        # With --strict, a broken link or anchor between pages fails the build.
        "validation": {
            "omitted_files": "warn",
            "absolute_links": "warn",
            "unrecognized_links": "warn",
            "anchors": "warn",
        },
    }
    return yaml.safe_dump(config, sort_keys=False, allow_unicode=True)


def _mkdocs_build(config: Path, site: Path) -> None:
    if importlib.util.find_spec("mkdocs") is None:
        raise UsageError("mkdocs is not installed: `pip install -e .[dev]` (make does) installs it")
    command = [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "-f", str(config), "-d", str(site)]
    completed = subprocess.run(command, capture_output=True, text=True, timeout=600)
    if completed.returncode != 0:
        raise UsageError(f"mkdocs build failed:\n{(completed.stderr or completed.stdout)[-3000:]}")
