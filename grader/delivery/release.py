"""`python -m grader release --out DIR`: the student template repository for GitHub Classroom.

The release holds what a student needs and nothing an instructor keeps back: a README for
students, `assignments/` (stubs generated from solutions/, notebooks, public tests), the
lectures and their figures, the grader package without its hidden suites and without the
instructor-only delivery commands, the pristine stubs in grader/given/ (where the grader reads the
course's given code from), course.toml, pyproject.toml, environment.yml, the Makefile
without the targets that need the instructor's tree, and `.github/workflows/classroom.yml` (one
step per module running its public tests, then the GitHub Classroom grading reporter).
solutions/, grader/suites/, tests/ and lectures/scripts/ are never copied.
"""

from __future__ import annotations

import argparse
import re
import shutil
from pathlib import Path

from grader.course import Course
from grader.report.classroom import crashed_payload, encode, runner_id
from grader.sandbox.given import PRISTINE
from grader.sync import BEGIN, END, stubs
from grader.usage import UsageError

HELP = "write the student template repository (GitHub Classroom) to --out DIR"

TEMPLATES = Path(__file__).resolve().parent / "templates"
# Makefile targets that need the instructor's tree (tests/, solutions/, this command, the site's).
INSTRUCTOR_TARGETS = ("test", "bench", "sync", "release", "site", "gpu-check")
SKIPPED_NAMES = {"__pycache__", ".ipynb_checkpoints", ".pytest_cache", ".DS_Store"}
COURSE_FILES = ("course.toml", "pyproject.toml", "environment.yml", ".gitignore")
WORKFLOW = Path(".github") / "workflows" / "classroom.yml"
STEP_TIMEOUT_MIN = 25  # a module step's grading; the step itself is killed 5 minutes later
GRADING_DID_NOT_FINISH = (
    "Grading {module} did not finish: the course's environment failed to install, or the grader "
    "crashed or ran past the step's time limit. This step's log in the Actions tab says which."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, metavar="DIR", help="folder to write (outside this repository)")
    parser.add_argument("--force", action="store_true", help="replace a previous release in DIR (its .git is kept)")


def run(course: Course, options: argparse.Namespace) -> int:
    out = Path(options.out).resolve()
    files = write_release(course, out, force=options.force)
    size = sum(path.stat().st_size for path in files)
    print(f"wrote {len(files)} files ({size / 1e6:.1f} MB) to {out}")
    return 0


def write_release(course: Course, out: Path, *, force: bool = False) -> list[Path]:
    """Write the release of `course` into `out`; return the files written.

    Refuses (UsageError) an `out` inside the course's repository, and an `out` holding anything
    but `.git` unless `force` and it holds a previous release (then everything but `.git` is
    removed first: a clone of the template repository can be refreshed in place). The stubs are
    generated from solutions/; the notebooks and public tests are copied from assignments/.
    """
    root = course.root.resolve()
    if out == root or out.is_relative_to(root):
        raise UsageError(f"--out {out} is inside the course repository; choose a folder outside {root}")
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} is a file, not a folder")
    contents = [entry for entry in out.iterdir() if entry.name != ".git"] if out.is_dir() else []
    if contents:
        if not force:
            raise UsageError(f"--out {out} is not empty (add --force to replace a previous release)")
        if not (out / WORKFLOW).is_file():
            raise UsageError(f"--out {out} holds no previous release ({WORKFLOW}): --force replaces only that")
        for entry in contents:
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
    out.mkdir(parents=True, exist_ok=True)

    written: list[Path] = []
    for name in course.modules:
        student_files = {course.public_tests(name) / file for file in course.module(name).files}
        written += _copy_tree(course.public_tests(name), out / "assignments" / name, leave_out=tuple(student_files))
    # The stubs come straight from solutions/ (what `sync` writes), so a stale assignments/ is no risk.
    # A pristine copy of each goes beside the grader: the given code it re-installs over the
    # student's working copy is read from there (grader/sandbox/given.py), never from assignments/.
    for stub in stubs(course):
        target = stub.target.relative_to(root)
        written.append(_write(out / target, stub.text))
        written.append(_write(out / PRISTINE / target.relative_to("assignments"), stub.text))
    written += _copy_lectures(root / "lectures", out / "lectures")
    written += _copy_tree(root / "grader", out / "grader", leave_out=_instructor_only(root))
    for name in COURSE_FILES:
        if (root / name).is_file():
            written.append(_copy_file(root / name, out / name))
    makefile = (root / "Makefile").read_text()
    written.append(_write(out / "Makefile", strip_targets(makefile, INSTRUCTOR_TARGETS)))
    written.append(_write(out / "README.md", student_readme(course, torch_spec(makefile))))
    workflow = classroom_workflow(course, torch_spec(makefile))
    written.append(_write(out / WORKFLOW, workflow))

    leaked = [str(path.relative_to(out)) for path in written if _has_fence(path)]
    if leaked:
        raise UsageError(f"refusing to release solution code ({BEGIN} in {', '.join(leaked)})")
    return written


def _instructor_only(root: Path) -> tuple[Path, ...]:
    """The hidden suites, and every delivery command with its helpers and templates (they are
    for instructors; grader/cli.py offers only those present)."""
    delivery = root / "grader" / "delivery"
    return (root / "grader" / "suites", *(p for p in delivery.iterdir() if p.name != "__init__.py"))


def _copy_tree(source: Path, target: Path, leave_out: tuple[Path, ...] = ()) -> list[Path]:
    written = []
    for path in sorted(source.rglob("*")):
        relative = path.relative_to(source)
        if SKIPPED_NAMES & set(relative.parts) or any(path.is_relative_to(p) for p in leave_out):
            continue
        if path.is_file():
            written.append(_copy_file(path, target / relative))
    return written


def _copy_lectures(source: Path, target: Path) -> list[Path]:
    """The lectures and their figures; not lectures/scripts, which run the solutions."""
    written = [_copy_file(path, target / path.name) for path in sorted(source.glob("*.md"))]
    if (source / "figures").is_dir():
        written += _copy_tree(source / "figures", target / "figures")
    return written


def _copy_file(source: Path, target: Path) -> Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(source, target)
    return target


def _write(target: Path, text: str) -> Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)
    return target


def _has_fence(path: Path) -> bool:
    """Whether `path` holds a solution fence with code inside (grader/sync.py documents the
    fences with an example whose body is `...`, which is no solution)."""
    try:
        lines = [line.strip() for line in path.read_text().splitlines()]
    except UnicodeDecodeError:  # a figure
        return False
    inside = False
    for line in lines:
        if line == BEGIN:
            inside = True
        elif line == END:
            inside = False
        elif inside and line not in ("", "..."):
            return True
    return inside


def torch_spec(makefile: str) -> str:
    """The Makefile's `TORCH_SPEC ?= ...` pin (the CPU PyTorch the course is tested with)."""
    found = re.search(r"^TORCH_SPEC\s*\??=\s*(\S+)\s*$", makefile, re.MULTILINE)
    if not found:
        raise UsageError("the Makefile has no `TORCH_SPEC ?= torch==X.Y.Z` line to pin PyTorch with")
    return found.group(1)


def strip_targets(makefile: str, targets: tuple[str, ...]) -> str:
    """`makefile` without the rules of `targets` (rule line, recipe and the blank lines after
    them) and without them in .PHONY."""
    kept: list[str] = []
    skipping = False
    for line in makefile.splitlines(keepends=True):
        rule = re.match(r"^([A-Za-z0-9_.-]+)\s*:(?!=)", line)
        if rule:
            skipping = rule.group(1) in targets
        elif skipping and not (line.startswith("\t") or not line.strip()):
            skipping = False
        if skipping:
            continue
        if line.startswith(".PHONY:"):
            names = [n for n in line.split(":", 1)[1].split() if n not in targets]
            line = f".PHONY: {' '.join(names)}\n"
        kept.append(line)
    return "".join(kept)


def student_readme(course: Course, torch: str) -> str:
    """The release's README.md, from templates/release_README.md; modules in lecture order."""
    modules = sorted(course.modules.values(), key=lambda m: m.lecture)
    rows = [f"| `{m.name}` | [{m.lecture}]({m.lecture}): {m.title} |" for m in modules]
    return _fill(
        (TEMPLATES / "release_README.md").read_text(),
        TITLE=course.title,
        MODULE_TABLE="\n".join(rows),
        FIRST_MODULE=modules[0].name,
        FIRST_LECTURE=modules[0].lecture,
        TORCH_SPEC=torch,
    )


def classroom_workflow(course: Course, torch: str) -> str:
    """.github/workflows/classroom.yml: one graded step per module, then the grading reporter.

    Every step runs unless the workflow was cancelled, and always leaves a result: when grading
    did not report (the install failed, the grader crashed or ran out of time), the step writes
    a zero-score result that says so, and the reporter still adds up every module. Step ids and
    runner names are the modules' names in letters and digits only, as the reporter requires.
    """
    steps, env, runners = [], [], []
    for name, module in course.modules.items():
        runner = runner_id(name)
        fallback = encode(crashed_payload(name, module.points, GRADING_DID_NOT_FINISH.format(module=name)))
        steps.append(
            f'      - name: "{name}: public tests"\n'
            f"        id: {runner}\n"
            "        if: ${{ !cancelled() }}\n"
            f"        timeout-minutes: {STEP_TIMEOUT_MIN + 5}\n"
            "        run: |\n"
            f"          timeout {STEP_TIMEOUT_MIN}m {grade_command(name)} || true\n"
            f"          grep -q '^result=' \"$GITHUB_OUTPUT\" || echo \"result={fallback}\" >> \"$GITHUB_OUTPUT\"\n"
        )
        env.append(f'          {runner.upper()}_RESULTS: "${{{{ steps.{runner}.outputs.result }}}}"\n')
        runners.append(runner)
    if len(set(runners)) < len(runners):
        raise UsageError(f"two modules have the same name in letters and digits: {', '.join(runners)}")
    return _fill(
        (TEMPLATES / "classroom.yml").read_text(),
        TORCH_SPEC=torch,
        MODULE_STEPS="".join(steps).rstrip("\n"),
        REPORTER_ENV="".join(env).rstrip("\n"),
        RUNNERS=",".join(runners),
    )


def grade_command(module: str) -> str:
    """A module step's grading: its public tests, the result for the reporter in GITHUB_OUTPUT
    and the scoreboard, with every failure's reason, on standard error (the step's log)."""
    return f".venv/bin/python -m grader grade {module} --public-only --format classroom"


def _fill(template: str, **values: str) -> str:
    for key, value in values.items():
        template = template.replace(f"@@{key}@@", value)
    leftover = re.search(r"@@[A-Z_]+@@", template)
    if leftover:
        raise UsageError(f"a release template has no value for {leftover.group(0)}")
    return template
