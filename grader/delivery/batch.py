"""`python -m grader batch`: grade a class, one student per grader process, several at a time.

    python -m grader batch --submissions DIR --out DIR [MODULE...] [--jobs N] [--force]
        [--shard i/n] [--time-limit S] [--student-limit S] [--no-perf] [-k EXPR] [--device cpu|cuda]
    python -m grader batch merge --out DIR PART_DIR...

--submissions holds one folder per student, each in one of three layouts: a submission (one
folder per module), a cloned GitHub Classroom repository (module folders under `assignments/`)
or an nbgrader `submitted/<student>/` folder (one folder per assignment, named after the
module). An nbgrader course directory itself may be given: its `submitted/` is used.

Every student is graded by its own `python -m grader grade --format json` process in its own
process group, so a crash, hang or memory blow-up stays with that student: a grader that fails or
runs past --student-limit is killed with every process it started and becomes an error row; its
temporary folders go with it (each grader gets a TMPDIR of its own, removed after it). Each grader
gets an equal share of the CPU cores for torch's threads (OMP_NUM_THREADS, unless it is set).

--out receives `grades.csv` (student, one score column per module, total, max, status) and per
student `results.json` (Gradescope shape), `feedback.md`, `feedback.html`, `grading.json` (the
settings it was graded with) and `grader.log`. A student whose results.json is newer than every
file of their submission, graded with the same settings, is not graded again unless --force;
grades.csv is rebuilt on every run from the results of all the students of the run.

--shard i/n grades the students whose index in name order is i modulo n, so n machines grade
disjoint shares into their own --out; `batch merge` combines those folders into one, refusing a
student that two parts graded differently.
"""

from __future__ import annotations

import argparse
import copy
import csv
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grader import system
from grader.course import Course
from grader.report.feedback import feedback_html, feedback_markdown, module_feedback
from grader.usage import UsageError

HELP = "grade a class of submissions in parallel (and `batch merge` shard outputs)"

DEFAULT_STUDENT_LIMIT_S = 3600.0
GRADED, MISSING = "graded", "no module folders found"
RESULTS, SETTINGS, LOG = "results.json", "grading.json", "grader.log"
GENERATED = (RESULTS, SETTINGS, LOG, "feedback.md", "feedback.html")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Both forms share one parser: the positionals are MODULE... or `merge` PART_DIR...."""
    parser.description = __doc__
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    _add_options(parser, positionals=argparse.REMAINDER)


def _add_options(parser: argparse.ArgumentParser, positionals: Any) -> None:
    # REMAINDER lets `batch merge --out DIR PART...` through argparse; run() re-reads what follows
    # the first positional with parse_intermixed_args, so options and positionals mix in any order.
    parser.add_argument(
        "targets",
        nargs=positionals,
        metavar="MODULE... | merge PART_DIR...",
        help="modules to grade (default: every module), or `merge` and the shard output folders to combine",
    )
    parser.add_argument("--submissions", metavar="DIR", help="one folder per student")
    parser.add_argument("--out", metavar="DIR", help="where grades.csv and the per-student folders go")
    parser.add_argument(
        "--jobs", type=int, metavar="N", help="students graded at once (default: half the CPU cores, at least 1)"
    )
    parser.add_argument("--force", action="store_true", help="grade again students already graded")
    parser.add_argument("--shard", metavar="i/n", help="grade only students whose index in name order is i mod n")
    parser.add_argument("--time-limit", type=float, metavar="S", help="seconds per call (default: course.toml)")
    parser.add_argument(
        "--student-limit",
        type=float,
        default=DEFAULT_STUDENT_LIMIT_S,
        metavar="S",
        help=f"wall-clock seconds for grading one student before it is stopped (default {DEFAULT_STUDENT_LIMIT_S:g})",
    )
    parser.add_argument("--no-perf", action="store_true", help="skip performance checks")
    parser.add_argument("-k", "--select", metavar="EXPR", help="only tests matching this pytest -k expression")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))


def _reread(options: argparse.Namespace) -> argparse.Namespace:
    """Options that came after the first positional (argparse.REMAINDER kept them raw)."""
    if not any(t.startswith("-") for t in options.targets):
        return options
    parser = argparse.ArgumentParser(prog="python -m grader batch")
    _add_options(parser, positionals="*")
    return parser.parse_intermixed_args(options.targets, namespace=copy.copy(options))


def run(course: Course, options: argparse.Namespace) -> int:
    """Grade the class (or merge shard outputs); 0 when every student has a row in grades.csv."""
    options = _reread(options)
    if options.targets[:1] == ["merge"]:
        return merge(options.targets[1:], options.out)
    system.require_sandbox("grading a class")
    return grade_class(course, options)


# ---- finding students -----------------------------------------------------------------------


@dataclass
class Student:
    """One student's folder and, when one was found, the folder holding their module folders."""

    name: str
    folder: Path
    submission: Path | None
    layout: str  # "submission", "classroom", "nbgrader", or "" when no module folder was found


def find_students(submissions: Path, modules: list[str]) -> list[Student]:
    """Every student folder under `submissions` (hidden folders skipped), sorted by name."""
    if (submissions / "submitted").is_dir() and (submissions / "nbgrader_config.py").is_file():
        submissions = submissions / "submitted"
    students = []
    for folder in sorted(submissions.iterdir(), key=lambda p: p.name):
        if folder.is_dir() and not folder.name.startswith("."):
            students.append(_detect(folder, modules))
    return students


def _detect(folder: Path, modules: list[str]) -> Student:
    def has_modules(root: Path) -> bool:
        return any((root / m).is_dir() for m in modules)

    if has_modules(folder):
        nbgrader = any((folder / m / "timestamp.txt").is_file() for m in modules)
        return Student(folder.name, folder, folder, "nbgrader" if nbgrader else "submission")
    if has_modules(folder / "assignments"):
        return Student(folder.name, folder, folder / "assignments", "classroom")
    return Student(folder.name, folder, None, "")


def parse_shard(text: str | None) -> tuple[int, int]:
    """`i/n` -> (i, n) with 0 <= i < n; no shard is 0/1."""
    if text is None:
        return 0, 1
    try:
        index, count = (int(part) for part in text.split("/"))
    except ValueError:
        raise UsageError(f"--shard {text!r}: expected i/n, e.g. 0/4") from None
    if count < 1 or not 0 <= index < count:
        raise UsageError(f"--shard {text!r}: need 0 <= i < n")
    return index, count


def shard_of(students: list[Student], index: int, count: int) -> list[Student]:
    """The share of shard `index` of `count`: stable, by position in name order."""
    ordered = sorted(students, key=lambda s: s.name)
    return [s for position, s in enumerate(ordered) if position % count == index]


# ---- grading one student --------------------------------------------------------------------


@dataclass
class Outcome:
    """What became of one student in this run: their grades.csv status and grading time."""

    student: Student
    status: str  # GRADED, MISSING or "error: <reason>"
    graded_now: bool = False
    seconds: float = 0.0


def _settings(modules: list[str], options: argparse.Namespace) -> dict[str, Any]:
    return {
        "modules": modules,
        "select": options.select,
        "perf": not options.no_perf,
        "time_limit_s": options.time_limit,
        "device": options.device,
    }


def _newest_file(folder: Path) -> float:
    """The latest mtime of the submission's files (bytecode caches and hidden folders ignored:
    importing the student's code writes __pycache__ while it is graded)."""
    newest = 0.0
    for root, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if d != "__pycache__" and not d.startswith(".")]
        for name in files:
            try:
                newest = max(newest, os.stat(os.path.join(root, name)).st_mtime)
            except FileNotFoundError:
                continue
    return newest


def is_current(student: Student, out: Path, settings: dict[str, Any]) -> bool:
    """Whether the student's results are newer than their submission and from the same settings."""
    results, recorded = out / RESULTS, out / SETTINGS
    if student.submission is None or not results.is_file() or not recorded.is_file():
        return False
    try:
        if json.loads(recorded.read_text()) != settings:
            return False
    except ValueError:
        return False
    return results.stat().st_mtime > _newest_file(student.submission)


def _command(student: Student, modules: list[str], options: argparse.Namespace, results: Path) -> list[str]:
    command = [sys.executable, "-m", "grader", "grade", *modules, "--submission", str(student.submission)]
    command += ["--format", "json", "--out", str(results), "--device", options.device]
    if options.no_perf:
        command.append("--no-perf")
    if options.time_limit is not None:
        command += ["--time-limit", str(options.time_limit)]
    if options.select:
        command += ["-k", options.select]
    return command


def _signal(pid: int, sig: signal.Signals, own_group: int) -> None:
    """Send `sig` to the process group `pid` leads or belongs to (never the batch's own group)."""
    try:
        group = os.getpgid(pid)
        if group != own_group:
            os.killpg(group, sig)
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _kill_tree(process: subprocess.Popen) -> None:
    """SIGKILL the grader and everything it started, including sandbox workers, which lead their
    own process groups. The tree is frozen first (SIGSTOP), level by level, so that nothing can
    fork out of it, nor be orphaned out of sight, between finding and killing it."""
    own_group = os.getpgid(0)
    stopped: set[int] = set()
    for _ in range(100):
        new = {process.pid, *system.descendants(process.pid)} - stopped
        if not new:
            break
        for pid in new:
            _signal(pid, signal.SIGSTOP, own_group)
        stopped |= new
    for pid in stopped:
        _signal(pid, signal.SIGKILL, own_group)
    process.wait()
    # SIGKILL is delivered asynchronously: wait (briefly) until the others have died too.
    deadline = time.monotonic() + 10
    while any(system.is_running(pid) for pid in stopped) and time.monotonic() < deadline:
        time.sleep(0.05)


def _clear(out: Path) -> None:
    for name in GENERATED:
        (out / name).unlink(missing_ok=True)


def grader_environment(temporary: str, jobs: int) -> dict[str, str]:
    """The environment of one of `jobs` graders run at once: TMPDIR `temporary` and, unless
    OMP_NUM_THREADS is already set, an equal share of the CPU cores (at least 1) for torch's
    threads. With torch's default of one thread per core in every grader, an operator whose
    threads wait for a peer descheduled by another grader spins at its barriers: on 2 cores, one
    busy process beside a notebook on 2 threads made it 8 times slower."""
    share = max(1, (os.cpu_count() or 1) // jobs)
    return {"OMP_NUM_THREADS": str(share), **os.environ, "TMPDIR": temporary}


def grade_student(
    course: Course, student: Student, modules: list[str], options: argparse.Namespace, out: Path, jobs: int = 1
) -> Outcome:
    """Grade one student in a subprocess (one of `jobs` at once) and write their results and
    feedback into `out`."""
    started, wall = time.time(), time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    _clear(out)
    partial = out / f"{RESULTS}.partial"
    partial.unlink(missing_ok=True)
    # The grader's temporary folders (its worlds', its zygotes') go into one folder of the
    # student's, removed here: a grader killed at --student-limit cannot remove its own.
    temporary = tempfile.mkdtemp(prefix="grader-student-")
    try:
        with open(out / LOG, "w") as log:
            process = subprocess.Popen(
                _command(student, modules, options, partial),
                cwd=course.root,
                env=grader_environment(temporary, jobs),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # one group per student: a stop takes the whole grading
            )
            try:
                code = process.wait(timeout=options.student_limit)
            except subprocess.TimeoutExpired:
                _kill_tree(process)
                reason = f"error: grading took longer than {options.student_limit:g} s and was stopped"
                return Outcome(student, reason, seconds=time.perf_counter() - wall)
    finally:
        shutil.rmtree(temporary, ignore_errors=True)
    seconds = time.perf_counter() - wall
    reason = _failure(code, partial, out / LOG)
    if reason:
        partial.unlink(missing_ok=True)
        return Outcome(student, f"error: {reason}", seconds=seconds)
    results = json.loads(partial.read_text())
    _write_feedback(course, student, results, out)
    (out / SETTINGS).write_text(json.dumps(_settings(modules, options), indent=2) + "\n")
    partial.replace(out / RESULTS)
    # Stamped with the start of grading: a file the student changes meanwhile is newer.
    os.utime(out / RESULTS, (started, started))
    return Outcome(student, GRADED, graded_now=True, seconds=seconds)


def _grade_safely(
    course: Course, student: Student, modules: list[str], options: argparse.Namespace, out: Path, jobs: int
) -> Outcome:
    """grade_student, with a failure of the batch's own bookkeeping (a full disk, an unreadable
    folder) turned into an error row for that student rather than the end of the batch."""
    try:
        return grade_student(course, student, modules, options, out, jobs)
    except OSError as error:
        return Outcome(student, f"error: {type(error).__name__}: {error}")


def _failure(code: int, partial: Path, log: Path) -> str:
    """Why the grader process produced no usable results ("" when it did)."""
    if code < 0:
        return f"the grader was killed by signal {signal.Signals(-code).name}"
    if code != 0:
        lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
        return f"the grader exited with status {code}: {lines[-1].strip() if lines else 'no output'}"
    try:
        json.loads(partial.read_text())
    except (OSError, ValueError):
        return "the grader wrote no readable results"
    return ""


def _write_feedback(course: Course, student: Student, results: dict[str, Any], out: Path) -> None:
    titles = {name: module.title for name, module in course.modules.items()}
    (out / "feedback.md").write_text(feedback_markdown(results, student=student.name, titles=titles))
    (out / "feedback.html").write_text(feedback_html(results, student=student.name, titles=titles))


# ---- the class ------------------------------------------------------------------------------


def _row(outcome: Outcome, modules: list[str], course: Course, out: Path) -> dict[str, str]:
    points = sum(course.module(m).points for m in modules)
    row = {"student": outcome.student.name, **{m: "" for m in modules}, "total": "0", "max": f"{points:g}"}
    row["status"] = outcome.status
    if outcome.status == GRADED:
        results = json.loads((out / outcome.student.name / RESULTS).read_text())
        graded = {m.name: m for m in module_feedback(results)}
        for name in modules:
            row[name] = f"{round(graded[name].score, 2):g}" if name in graded else "0"
        row["total"] = f"{round(results['score'], 2):g}"
        row["max"] = f"{round(sum(m.max_score for m in graded.values()), 2):g}"
    return row


def write_grades(path: Path, header: list[str], rows: list[dict[str, str]]) -> None:
    """grades.csv, one row per student in name order."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=header, lineterminator="\n")
    writer.writeheader()
    writer.writerows(sorted(rows, key=lambda r: r["student"]))
    path.write_text(buffer.getvalue())


class _Progress:
    """A rich progress bar on a terminal; otherwise one line per finished student."""

    def __init__(self, total: int) -> None:
        self.total, self.done, self.lock = total, 0, threading.Lock()
        self.bar = None
        if sys.stderr.isatty() and total:
            from rich.console import Console
            from rich.progress import Progress

            self.bar = Progress(console=Console(stderr=True))
            self.task = self.bar.add_task("grading", total=total)
            self.bar.start()

    def finished(self, outcome: Outcome) -> None:
        with self.lock:
            self.done += 1
            student, took = outcome.student, f"{outcome.seconds:.1f} s"
            line = f"[{self.done}/{self.total}] {student.name} ({student.layout}): {outcome.status} ({took})"
            if self.bar is not None:
                self.bar.console.print(line, highlight=False, markup=False)
                self.bar.update(self.task, completed=self.done)
            else:
                print(line, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def _check_folders(options: argparse.Namespace) -> tuple[Path, Path]:
    if not options.submissions or not options.out:
        raise UsageError("batch needs --submissions DIR and --out DIR")
    submissions, out = Path(options.submissions).resolve(), Path(options.out).resolve()
    if not submissions.is_dir():
        raise UsageError(f"submissions folder {options.submissions!r} does not exist")
    if out == submissions or submissions in out.parents:
        raise UsageError("--out must not be inside --submissions (it would be taken for a student)")
    if options.jobs is not None and options.jobs < 1:
        raise UsageError("--jobs must be at least 1")
    if options.student_limit <= 0:
        raise UsageError("--student-limit must be positive")
    return submissions, out


def grade_class(course: Course, options: argparse.Namespace) -> int:
    """Grade every student of the shard that is not already graded, then rebuild grades.csv."""
    modules = options.targets or list(course.modules)
    for name in modules:
        course.module(name)  # raises CourseError (one line, exit 2) for an unknown module
    submissions, out = _check_folders(options)
    index, count = parse_shard(options.shard)
    students = shard_of(find_students(submissions, modules), index, count)
    settings = _settings(modules, options)
    outcomes: list[Outcome] = []
    todo: list[Student] = []
    for student in students:
        if student.submission is None:
            outcomes.append(Outcome(student, MISSING))
        elif not options.force and is_current(student, out / student.name, settings):
            outcomes.append(Outcome(student, GRADED))
        else:
            todo.append(student)
    missing = sum(o.status == MISSING for o in outcomes)
    skipped = len(outcomes) - missing
    jobs = options.jobs or max(1, (os.cpu_count() or 1) // 2)
    print(
        f"{len(students)} student(s) in {submissions}"
        + (f" (shard {index}/{count})" if count > 1 else "")
        + f": grading {len(todo)} with {jobs} job(s); {skipped} already graded, {missing} without module folders",
        flush=True,
    )
    started = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    progress = _Progress(len(todo))
    try:
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            futures = [pool.submit(_grade_safely, course, s, modules, options, out / s.name, jobs) for s in todo]
            for future in as_completed(futures):
                outcome = future.result()
                outcomes.append(outcome)
                progress.finished(outcome)
    finally:
        progress.close()
    rows = [_row(o, modules, course, out) for o in outcomes]
    write_grades(out / "grades.csv", ["student", *modules, "total", "max", "status"], rows)
    errors = sum(o.status.startswith("error") for o in outcomes)
    print(
        f"graded {sum(o.graded_now for o in outcomes)}, skipped {skipped} (already graded), "
        f"errors {errors}, no module folders {missing} in {time.perf_counter() - started:.1f} s; "
        f"wrote {out / 'grades.csv'}"
    )
    return 0


# ---- merging shards -------------------------------------------------------------------------


def _read_grades(part: Path) -> tuple[list[str], list[dict[str, str]]]:
    path = part / "grades.csv"
    if not path.is_file():
        raise UsageError(f"{part} has no grades.csv: is it the --out folder of a batch run?")
    with open(path, newline="") as file:
        reader = csv.DictReader(file)
        return list(reader.fieldnames or []), list(reader)


def _same_files(a: Path, b: Path) -> bool:
    for name in (RESULTS, SETTINGS):
        if (a / name).is_file() != (b / name).is_file():
            return False
        if (a / name).is_file() and (a / name).read_bytes() != (b / name).read_bytes():
            return False
    return True


def merge(parts: list[str], out: str | None) -> int:
    """Combine the --out folders of shard runs into `out`: one grades.csv, every student folder.

    A student in several parts must have the same row and the same results there; otherwise
    nothing is written and the command fails naming the student.
    """
    if not out or not parts:
        raise UsageError("batch merge needs --out DIR and at least one PART_DIR")
    target = Path(out).resolve()
    folders = [Path(p).resolve() for p in parts]
    for folder in folders:
        if not folder.is_dir():
            raise UsageError(f"part folder {folder} does not exist")
        if folder == target:
            raise UsageError("--out must be a new folder, not one of the parts")
    header: list[str] | None = None
    rows: dict[str, tuple[dict[str, str], Path]] = {}
    for folder in folders:
        part_header, part_rows = _read_grades(folder)
        if header is not None and part_header != header:
            raise UsageError(f"{folder} graded other modules ({', '.join(part_header)}) than {folders[0]}")
        header = part_header
        for row in part_rows:
            name = row["student"]
            if name in rows:
                seen, where = rows[name]
                if seen != row or not _same_files(where / name, folder / name):
                    raise UsageError(f"student {name!r} is in {where} and {folder} with different results")
                continue
            rows[name] = (row, folder)
    target.mkdir(parents=True, exist_ok=True)
    for name, (_, folder) in rows.items():
        if (folder / name).is_dir():
            shutil.copytree(folder / name, target / name, dirs_exist_ok=True)
    write_grades(target / "grades.csv", header or [], [row for row, _ in rows.values()])
    print(f"merged {len(rows)} student(s) from {len(folders)} part(s) into {target / 'grades.csv'}")
    return 0
