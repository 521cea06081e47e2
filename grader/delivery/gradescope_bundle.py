"""`python -m grader gradescope [MODULE...] --out autograder.zip`: the Gradescope autograder.

The zip holds, at its root, `setup.sh` (run once by Gradescope on its Ubuntu image: a venv with
the CPU build of PyTorch pinned like the Makefile's TORCH_SPEC, then the course installed from
`course/`) and `run_autograder` (run for every submission), and `course/`: course.toml (its
hidden tests given the bundle's visibility), pyproject.toml, README.md, the grader package with
its hidden suites, and for each module its public tests and stubs (also in grader/given/, where the
grader reads the course's given code from). Never solutions/.

For every submission, `run_autograder` runs `python -m grader.delivery.gradescope_bundle ROOT`
(this module's `main`): it gathers the student's files from ROOT/submission into one folder per
module, grades them and writes ROOT/results/results.json.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
import traceback
import zipfile
from pathlib import Path

from grader.course import Course, CourseError, load_course, tomllib
from grader.sandbox.given import PRISTINE
from grader.sync import stubs
from grader.usage import UsageError

HELP = "build the Gradescope autograder bundle (setup.sh, run_autograder) as a zip"

VISIBILITIES = ("hidden", "after_due_date", "after_published", "visible")
SKIPPED_NAMES = {"__pycache__", ".ipynb_checkpoints", ".pytest_cache", "__MACOSX"}
EXECUTABLE, REGULAR = 0o100755 << 16, 0o100644 << 16  # zip external attributes: rwxr-xr-x, rw-r--r--
LISTED_NOTES = 10  # unrecognised files named one by one; the rest are counted
TEMPLATES = Path(__file__).resolve().parent / "templates"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("modules", nargs="*", metavar="MODULE", help="modules the bundle grades (default: all)")
    parser.add_argument("--out", default="autograder.zip", help="the zip to write (default: autograder.zip)")
    parser.add_argument(
        "--hidden-visibility",
        choices=VISIBILITIES,
        default="after_due_date",
        help="when students see the hidden tests' names and verdicts (default: after_due_date)",
    )


def run(course: Course, options: argparse.Namespace) -> int:
    for name in options.modules:
        course.module(name)  # raises CourseError for an unknown module
    out = Path(options.out)
    if out.is_dir():
        raise UsageError(f"--out {out} is a folder; name the zip file to write")
    if not out.parent.is_dir():
        raise UsageError(f"--out {out}: folder {out.parent} does not exist")
    count = build_bundle(course, options.modules or list(course.modules), out, options.hidden_visibility)
    print(f"wrote {out} ({count} files, {out.stat().st_size / 1e6:.2f} MB): upload it as a Gradescope autograder")
    return 0


def build_bundle(course: Course, modules: list[str], out: Path, hidden_visibility: str) -> int:
    """Write the autograder zip for `modules` to `out`; return the number of files in it."""
    from grader.delivery.release import torch_spec  # the source tree only: the bundle has no release.py

    root = course.root
    makefile = (root / "Makefile").read_text()
    entries: dict[str, bytes] = {
        "setup.sh": _fill("setup.sh", TORCH_SPEC=torch_spec(makefile)).encode(),
        "run_autograder": _fill("run_autograder", MODULES=" ".join(modules)).encode(),
        "course/course.toml": with_hidden_visibility((root / "course.toml").read_text(), hidden_visibility).encode(),
        "course/pyproject.toml": (root / "pyproject.toml").read_bytes(),
        "course/README.md": (root / "README.md").read_bytes(),
    }
    for path in _files(root / "grader"):
        relative = path.relative_to(root)
        # Of the delivery commands only this one is needed: it is what run_autograder runs.
        if relative.parts[:2] == ("grader", "delivery") and path.name not in ("__init__.py", Path(__file__).name):
            continue
        entries[f"course/{relative.as_posix()}"] = path.read_bytes()
    for name in modules:
        for path in _files(course.public_tests(name)):
            if path.suffix == ".py" and path.name.startswith(("test_", "conftest")):
                entries[f"course/{path.relative_to(root).as_posix()}"] = path.read_bytes()
    # Stand-ins for files a submission lacks, generated from solutions/ as `sync` writes them, and
    # the pristine copies the grader re-installs the course's given code from (grader/sandbox/given.py).
    for stub in stubs(course, modules):
        relative = stub.target.relative_to(root)
        entries[f"course/{relative.as_posix()}"] = stub.text.encode()
        entries[f"course/{(PRISTINE / relative.relative_to('assignments')).as_posix()}"] = stub.text.encode()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as bundle:
        for name, data in sorted(entries.items()):
            info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))  # the same course, the same zip
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = EXECUTABLE if name in ("setup.sh", "run_autograder") else REGULAR
            bundle.writestr(info, data)
    return len(entries)


def _files(folder: Path) -> list[Path]:
    return [
        p
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not SKIPPED_NAMES & set(p.relative_to(folder).parts) and p.suffix != ".pyc"
    ]


def _fill(template: str, **values: str) -> str:
    text = (TEMPLATES / template).read_text()
    for key, value in values.items():
        text = text.replace(f"@@{key}@@", value)
    return text


def with_hidden_visibility(course_toml: str, visibility: str) -> str:
    """course.toml with `[defaults] hidden_visibility = "<visibility>"` (set or added)."""
    setting = f'hidden_visibility = "{visibility}"'
    text, count = re.subn(r"^hidden_visibility\s*=.*$", setting, course_toml, count=1, flags=re.MULTILINE)
    if not count:
        text, count = re.subn(r"^\[defaults\]\s*$", f"[defaults]\n{setting}", course_toml, count=1, flags=re.MULTILINE)
    if not count:
        text = f"{course_toml.rstrip()}\n\n[defaults]\n{setting}\n"
    if tomllib.loads(text).get("defaults", {}).get("hidden_visibility") != visibility:
        raise UsageError("could not set [defaults] hidden_visibility in course.toml; check its layout")
    return text


def gather_submission(course: Course, submission: Path, modules: list[str], target: Path) -> list[str]:
    """Copy the student's files from `submission` into `target/<module>/<file>`; return notes
    for results.json on what was missing, ambiguous or not recognised.

    A submission may be a tree with one folder per module (a GitHub repository: any depth) or a
    flat upload of .py files. A file counts for a module when course.toml lists its name for that
    module and it is not in the folder of another module; one in the module's own folder wins.
    A missing file is replaced by its stub, so the other files are still graded.
    """
    uploaded = [
        p
        for p in sorted(submission.rglob("*"))
        if p.is_file()
        and not any(part in SKIPPED_NAMES or part.startswith(".") for part in p.relative_to(submission).parts)
    ]
    notes: list[str] = []
    used: set[Path] = set()
    for name in modules:
        (target / name).mkdir(parents=True, exist_ok=True)
        for file in course.module(name).files:
            candidates = [
                p for p in uploaded if p.name == file and (p.parent.name == name or p.parent.name not in course.modules)
            ]
            own = [p for p in candidates if p.parent.name == name]
            if not candidates:
                shutil.copyfile(course.public_tests(name) / file, target / name / file)
                notes.append(f"{name}/{file} is missing from the submission: graded as the unedited stub")
                continue
            chosen = min(own or candidates, key=lambda p: (len(p.parts), str(p)))
            if len(candidates) > 1:
                shown = ", ".join(str(p.relative_to(submission)) for p in candidates)
                notes.append(f"several files could be {name}/{file} ({shown}): graded {chosen.relative_to(submission)}")
            shutil.copyfile(chosen, target / name / file)
            used.add(chosen)
    unrecognised = [str(p.relative_to(submission)) for p in uploaded if p not in used]
    if unrecognised:
        graded = ", ".join(f"{name}/{{{','.join(course.module(name).files)}}}" for name in modules)
        shown = ", ".join(unrecognised[:LISTED_NOTES])
        more = f" and {len(unrecognised) - LISTED_NOTES} more" if len(unrecognised) > LISTED_NOTES else ""
        notes.append(f"not graded (unrecognised or not needed): {shown}{more}; the files graded are {graded}")
    return notes


def autograde(course: Course, root: Path, modules: list[str], device: str) -> dict:
    """Grade root/submission and return the results.json document (the notes of
    gather_submission lead its `output`)."""
    from grader.report import render
    from grader.runner import grade

    with tempfile.TemporaryDirectory(prefix="graded-") as work:
        folder = Path(work) / "submission"
        notes = gather_submission(course, root / "submission", modules, folder)
        report = grade(course, modules, folder, device=device)
    report.submission = "submission"
    report.notes = notes + report.notes
    return json.loads(render(report, "gradescope", hidden_visibility=course.hidden_visibility))


def _device() -> str:
    wanted = os.environ.get("GRADER_DEVICE", "")
    if wanted:
        return wanted
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def main(argv: list[str]) -> int:
    """`python -m grader.delivery.gradescope_bundle ROOT` (what run_autograder runs): always
    writes ROOT/results/results.json, with the reason in `output` when grading failed."""
    if len(argv) != 1:
        print("usage: python -m grader.delivery.gradescope_bundle AUTOGRADER_ROOT", file=sys.stderr)
        return 2
    root = Path(argv[0])
    results = root / "results" / "results.json"
    results.parent.mkdir(parents=True, exist_ok=True)
    try:
        course = load_course()
        modules = os.environ.get("GRADER_MODULES", "").split() or list(course.modules)
        for name in modules:
            course.module(name)
        if not (root / "submission").is_dir():
            raise UsageError(f"no submission folder at {root / 'submission'}")
        document = autograde(course, root, modules, _device())
    except (UsageError, CourseError) as error:
        document, status = _failed(f"the autograder could not run: {error}"), 2
    except Exception:  # Gradescope shows nothing useful without results.json: say what broke
        document, status = _failed(f"the autograder failed; tell your instructor:\n{traceback.format_exc()}"), 1
    else:
        status = 0
    results.write_text(json.dumps(document, indent=2))
    print(f"{results}: score {document['score']}\n{document['output']}")
    return status


def _failed(message: str) -> dict:
    return {"score": 0, "output": message, "output_format": "text", "visibility": "visible", "tests": []}


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
