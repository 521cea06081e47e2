"""`python -m grader mutants MODULE`: how well do the tests catch a wrong solution? (instructor-only)

    python -m grader mutants MODULE [--limit N] [--seed S] [--shard I/N] [--jobs N] [--id ID ...] [--perf]
                                   [--out FILE]

Each mutant is the reference solution with one small change inside its fenced code (`<` for
`<=`, a dropped statement, `sum` for `mean`, ...: grader/delivery/mutation_operators.py). Each
is graded like a submission (public tests and hidden suite, `--no-perf`: a mutant is about
correctness, with course.toml's time limit per call, so a mutant that hangs is stopped and
killed). --perf adds the counted performance checks (bytes, memory, operators, FLOPs), which
alone see a mutant that only wastes, such as a buffer no longer freed; never the timed ones,
whose verdict depends on the machine's load. A mutant is killed when a test that the unchanged
reference passes does not pass (its grading stops there: a killed mutant costs seconds, not the
whole suite); one that passes everything survived: either the tests miss a
real bug, or the change cannot be seen by any input the docstring allows (an equivalent
mutant). Equivalent ones are listed, each with a one-line reason, in tests/mutants/<module>.toml:

    [[equivalent]]
    id = "routing.py:56:27:constant:-1"
    reason = "capacity_factor is a float > 0 or None: <= 0 and <= -1 reject the same values"

They are not graded, and count neither as killed nor as survived; a listed id that is no longer
generated is reported as stale. --limit N grades N mutants sampled with --seed (default 0),
spread over the module's functions first (with N at least their number, every fenced function
has a mutant), then over each function's operators; --id grades only the named ones (the
survivors of an earlier run, once tests were added for them). --shard I/N keeps the I-th of N
disjoint shards of whatever was chosen (a mutant's shard is a hash of its id, so shards do not
depend on one another or on the order of enumeration): a full run of a large module is done in
N sessions, each shard's report kept (--out) and its counts recorded in README.md's table.

The report (standard output; progress goes to standard error) gives the counts, the kill rate of
the non-equivalent mutants, the time taken, and every survivor's id and diff; --out also writes
it as JSON. Exit status 0 whenever the report was produced, whatever the kill rate.

Grading runs in this process (like tests/grading_server.py): the interpreter, torch, pytest and
the zygote that forks sandbox workers are paid once, not once per mutant. --jobs N > 1 starts N
such grading processes (this file run as a script) and keeps each busy.
"""

from __future__ import annotations

import argparse
import ast
import functools
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from queue import Queue
from typing import Any

from grader.course import COURSE_ROOT, Course, load_course
from grader.delivery.mutation_operators import Mutant, mutants
from grader.perf import TIMED_CHECK_WORDS
from grader.results import PASSED, SKIPPED
from grader.usage import UsageError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

HELP = "mutation testing: grade one-change variants of the reference and report the survivors"

KILLED, SURVIVED, EQUIVALENT = "killed", "survived", "equivalent"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = __doc__
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("module", metavar="MODULE", help="the module whose solution is mutated")
    parser.add_argument("--limit", type=int, metavar="N", help="grade N sampled mutants (default: all)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the sample and of the grading (default 0)")
    parser.add_argument("--shard", metavar="I/N", help="grade only shard I of N (0 <= I < N) of the mutants chosen")
    parser.add_argument("--jobs", type=int, default=1, metavar="N", help="mutants graded at once (default 1)")
    parser.add_argument("--id", action="append", dest="ids", metavar="ID", help="grade only this mutant (repeatable)")
    parser.add_argument(
        "--perf", action="store_true", help="also grade the counted performance checks (never the timed ones)"
    )
    parser.add_argument("--out", metavar="FILE", help="also write the report as JSON")


def run(course: Course, options: argparse.Namespace) -> int:
    module = course.module(options.module).name  # an unknown module is a usage error
    if options.limit is not None and options.limit < 1:
        raise UsageError(f"--limit must be at least 1, got {options.limit}")
    if options.jobs < 1:
        raise UsageError(f"--jobs must be at least 1, got {options.jobs}")
    shard = parse_shard(options.shard) if options.shard else None
    if not (course.root / "solutions" / module).is_dir():
        raise UsageError("mutants change the reference solutions, and there is no solutions/ folder here")

    started = time.perf_counter()
    every = module_mutants(course, module)
    equivalents = load_equivalents(equivalents_path(course, module))
    chosen = select(every, options.ids, options.limit, options.seed)
    if shard is not None:
        chosen = [m for m in chosen if in_shard(m, *shard)]
    to_grade = [m for m in chosen if m.id not in equivalents]
    print(f"{module}: {len(every)} mutants, grading {len(to_grade)}", file=sys.stderr, flush=True)
    try:
        verdicts = grade_mutants(course, module, to_grade, options.seed, options.jobs, options.perf)
    except KeyboardInterrupt:
        print("grader: mutants: interrupted, no report", file=sys.stderr)
        return 130
    report = Report(module, len(every), options.limit, options.seed, time.perf_counter() - started, options.perf)
    report.shard = options.shard if shard is not None else None
    report.stale = sorted(set(equivalents) - {m.id for m in every})
    for mutant in chosen:
        if mutant.id in equivalents:
            report.results.append(Result(mutant, EQUIVALENT, reason=equivalents[mutant.id]))
        else:
            report.results.append(verdicts[mutant.id])
    sys.stdout.write(report.text())
    if options.out:
        Path(options.out).write_text(json.dumps(report.to_dict(), indent=2) + "\n")
    return 0


# ---- which mutants ---------------------------------------------------------------------------


def module_mutants(course: Course, module: str) -> list[Mutant]:
    """Every mutant of the module's solution files, in course.toml's file order."""
    found = []
    for file in course.module(module).files:
        found += mutants(file, (course.root / "solutions" / module / file).read_text())
    return found


def equivalents_path(course: Course, module: str) -> Path:
    return course.root / "tests" / "mutants" / f"{module}.toml"


def load_equivalents(path: Path) -> dict[str, str]:
    """{id: reason} of the mutants judged equivalent (none when the file does not exist)."""
    if not path.is_file():
        return {}
    try:
        entries = tomllib.loads(path.read_text()).get("equivalent", [])
    except tomllib.TOMLDecodeError as error:
        raise UsageError(f"{path}: {error}") from None
    listed = {}
    for number, entry in enumerate(entries, start=1):
        if not (isinstance(entry.get("id"), str) and isinstance(entry.get("reason"), str) and entry["reason"]):
            raise UsageError(f"{path}: [[equivalent]] number {number} needs an id and a one-line reason")
        listed[entry["id"]] = entry["reason"]
    return listed


def select(every: list[Mutant], ids: list[str] | None, limit: int | None, seed: int) -> list[Mutant]:
    """The mutants named by --id (all when none), then a sample of --limit of them."""
    if ids:
        unknown = sorted(set(ids) - {m.id for m in every})
        if unknown:
            raise UsageError(f"no such mutant: {unknown[0]} (ids are file:line:col:operator:replacement)")
        every = [m for m in every if m.id in ids]
    return every if limit is None or limit >= len(every) else sample(every, limit, seed)


def parse_shard(text: str) -> tuple[int, int]:
    """"I/N" as (I, N), with 0 <= I < N."""
    index, _, count = text.partition("/")
    if not (index.isdigit() and count.isdigit() and int(index) < int(count)):
        raise UsageError(f"--shard takes I/N with 0 <= I < N (e.g. 0/8), got {text!r}")
    return int(index), int(count)


def in_shard(mutant: Mutant, index: int, count: int) -> bool:
    """Whether `mutant` is in shard `index` of `count`: a hash of its id, the same in every run."""
    return zlib.crc32(mutant.id.encode()) % count == index


def enclosing_function(mutant: Mutant) -> str:
    """The name of the innermost function (as Class.method for a method) whose lines hold the
    mutant's change, or "" outside any function."""
    inside = [(end - start, name) for start, end, name in _functions(mutant.original) if start <= mutant.line <= end]
    return min(inside)[1] if inside else ""


def _likely_suites(course: Course, module: str, file: str, text: str) -> list[str]:
    """Words of the test files likeliest to fail a mutant of `file` (run first: its grading stops
    at the first failure): the file's name, and the words of the function it changed
    (find_straggler's tests are in test_reliability_straggler.py)."""
    original = (course.root / "solutions" / module / file).read_text()
    pairs = zip(original.splitlines(), text.splitlines())
    line = next((number for number, (a, b) in enumerate(pairs, 1) if a != b), 0)
    inside = [(end - start, name) for start, end, name in _functions(original) if start <= line <= end]
    function = min(inside)[1] if inside else ""
    return [Path(file).stem, *(word for word in re.split(r"[._]", function) if len(word) >= 4)]


@functools.cache
def _functions(source: str) -> list[tuple[int, int, str]]:
    """(first line, last line, qualified name) of every function of `source`, methods included."""
    found = []
    stack: list[tuple[ast.AST, str]] = [(ast.parse(source), "")]
    while stack:
        node, prefix = stack.pop()
        for child in ast.iter_child_nodes(node):
            name = prefix
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    found.append((child.lineno, child.end_lineno or child.lineno, name))
                name += "."
            stack.append((child, name))
    return found


def sample(every: list[Mutant], limit: int, seed: int) -> list[Mutant]:
    """`limit` mutants spread over the module's functions, then over each function's operators:
    one from each function in turn (functions in a seeded random order); within a function, one
    from each of its operators in turn. With `limit` at least the number of functions, every
    function is in the sample. Returned in enumeration order. The same mutants are drawn
    whatever tests/mutants/ lists, so a sample stays comparable between runs."""
    rng = random.Random(seed)
    functions: dict[tuple[str, str], dict[str, list[int]]] = {}
    for index, mutant in enumerate(every):
        key = (mutant.file, enclosing_function(mutant))
        functions.setdefault(key, {}).setdefault(mutant.operator, []).append(index)
    queues = []
    for key in sorted(functions):
        operators = [functions[key][op] for op in sorted(functions[key])]
        for members in operators:
            rng.shuffle(members)
        rng.shuffle(operators)
        interleaved = [members[i] for i in range(max(map(len, operators))) for members in operators if i < len(members)]
        queues.append(interleaved[::-1])  # popped from the end: the interleaved order
    rng.shuffle(queues)
    picked: list[int] = []
    while len(picked) < limit:
        for queue in queues:
            if queue and len(picked) < limit:
                picked.append(queue.pop())
    return [every[index] for index in sorted(picked)]


# ---- grading ---------------------------------------------------------------------------------


@dataclass
class Result:
    """What became of one mutant: killed (by the tests named), survived or equivalent."""

    mutant: Mutant
    status: str
    failed: list[str] = field(default_factory=list)  # tests the reference passes and it did not
    seconds: float = 0.0
    reason: str = ""  # why it is equivalent


@contextmanager
def _run_seed(seed: int) -> Iterator[None]:
    """Grade with a fixed seed (unless GRADER_SEED pins one), so that a rerun draws the same inputs."""
    import grader.testing  # torch: imported by the commands that grade, not by every command line

    saved = grader.testing.RUN_SEED
    if "GRADER_SEED" not in os.environ:
        grader.testing.RUN_SEED = seed
    try:
        yield
    finally:
        grader.testing.RUN_SEED = saved


def graded_statuses(
    course: Course, module: str, file: str | None, text: str, seed: int, counted_perf: bool = False
) -> dict[str, str]:
    """{test name: status} of the module's solution graded with `file` replaced by `text` (the
    reference itself when file is None), in this process: without performance checks, or with
    the counted ones (`counted_perf`) and never the timed ones. A mutant's grading stops at its
    first failure (one failure kills it; the tests after it are not run, which makes a killed
    mutant cost seconds instead of the whole suite); the reference's runs every test."""
    from grader.runner import grade  # pytest and the sandbox: only when grading

    with tempfile.TemporaryDirectory(prefix="mutant-") as folder:
        submission = Path(folder)
        shutil.copytree(course.root / "solutions" / module, submission / module, ignore=_caches)
        if file is not None:
            (submission / module / file).write_text(text)
        with _run_seed(seed), _interruptible():
            select = f"not ({' or '.join(TIMED_CHECK_WORDS)})" if counted_perf else None
            mutant = file is not None
            report = grade(
                course,
                [module],
                submission,
                perf=counted_perf,
                select=select,
                first_failure=mutant,
                files_first=_likely_suites(course, module, file, text) if mutant else None,
            )
    if file is None:  # the reference must pass everything: say why it did not
        for test in report.tests:
            if test.status not in (PASSED, SKIPPED):
                print(f"the reference failed {test.name}:\n{test.message}", file=sys.stderr, flush=True)
    return {test.name: test.status for test in report.tests}


@contextmanager
def _interruptible() -> Iterator[None]:
    """Ctrl-C stops the whole run: pytest catches the KeyboardInterrupt and ends that grading
    only (reporting it interrupted), so it is raised again once grading has returned."""
    interrupted = []

    def stop(signum: int, frame: object) -> None:
        interrupted.append(signum)
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if interrupted:
        raise KeyboardInterrupt


def _caches(folder: str, names: list[str]) -> list[str]:
    return [name for name in names if name == "__pycache__"]


Grade = Callable[[str | None, str], dict[str, str]]  # (file or None for the reference, its text) -> statuses


def grade_mutants(
    course: Course, module: str, todo: list[Mutant], seed: int, jobs: int, counted_perf: bool = False
) -> dict[str, Result]:
    """Grade the reference once (the tests a mutant must keep passing), then every mutant."""
    verdicts: dict[str, Result] = {}
    if not todo:
        return verdicts
    jobs = min(jobs, len(todo))
    lock = threading.Lock()
    with _grader(course, module, seed, jobs, counted_perf) as grade:
        passing = _reference_passes(grade(None, ""), module)

        def judge(mutant: Mutant) -> None:
            started = time.perf_counter()
            statuses = grade(mutant.file, mutant.text)
            failed = [name for name in passing if statuses.get(name) not in (PASSED, None)]
            # none failed but some never ran: the grading stopped early (a crash, or a failure of a
            # test the reference skipped, which cannot be: those need a device, for every mutant)
            failed = failed or [name for name in passing if name not in statuses]
            result = Result(mutant, KILLED if failed else SURVIVED, failed, time.perf_counter() - started)
            with lock:
                verdicts[mutant.id] = result
                done = f"[{len(verdicts)}/{len(todo)}]"
            print(f"{done} {result.status:8} {mutant.id}  ({result.seconds:.1f} s)", file=sys.stderr, flush=True)

        if jobs == 1:
            for mutant in todo:  # in the main thread: pytest runs there
                judge(mutant)
        else:
            with ThreadPoolExecutor(max_workers=jobs) as threads:
                list(threads.map(judge, todo))
    return verdicts


def _reference_passes(statuses: dict[str, str], module: str) -> list[str]:
    """The tests the unchanged reference passes; all of them must (skipped ones aside), or a
    mutant's failures would prove nothing."""
    broken = [name for name, status in statuses.items() if status not in (PASSED, SKIPPED)]
    if broken:
        raise UsageError(f"the reference solution of {module} fails {len(broken)} test(s), e.g. {broken[0]}")
    return [name for name, status in statuses.items() if status == PASSED]


@contextmanager
def _grader(course: Course, module: str, seed: int, jobs: int, counted_perf: bool) -> Iterator[Grade]:
    """Grading in this process (jobs 1), or in whichever of `jobs` grading processes is free."""
    if jobs == 1:
        yield lambda file, text: graded_statuses(course, module, file, text, seed, counted_perf)
        return
    processes = [GradingProcess(course.root) for _ in range(jobs)]
    idle: Queue[GradingProcess] = Queue()
    for process in processes:
        idle.put(process)

    def grade_in_one(file: str | None, text: str) -> dict[str, str]:
        process = idle.get()
        try:
            return process.grade({"module": module, "file": file, "text": text, "seed": seed, "perf": counted_perf})
        finally:
            idle.put(process)

    try:
        yield grade_in_one
    finally:
        for process in processes:
            process.close()


class GradingProcess:
    """`python -m grader.delivery.mutants`: one long-lived grading process, one JSON line a mutant."""

    def __init__(self, root: Path) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "grader.delivery.mutants"],
            cwd=root,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def grade(self, request: dict[str, Any]) -> dict[str, str]:
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        answer = self.process.stdout.readline()
        if not answer:
            raise UsageError(f"a grading process died (exit status {self.process.wait()})")
        return json.loads(answer)

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait()


def serve() -> None:
    """The grading process's loop: a request per line on stdin, {test: status} per line back."""
    replies = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # whatever else is printed stays out of the replies
    course = load_course(COURSE_ROOT)
    for line in sys.stdin:
        request = json.loads(line)
        statuses = graded_statuses(
            course, request["module"], request["file"], request["text"], request["seed"], request["perf"]
        )
        replies.write(json.dumps(statuses) + "\n")
        replies.flush()


# ---- the report ------------------------------------------------------------------------------


@dataclass
class Report:
    module: str
    generated: int
    limit: int | None
    seed: int
    seconds: float
    perf: bool = False  # the counted performance checks were graded too
    shard: str | None = None  # "I/N": only that shard of the mutants chosen
    results: list[Result] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)  # equivalent ids no longer generated

    def count(self, status: str) -> int:
        return sum(result.status == status for result in self.results)

    @property
    def kill_rate(self) -> float | None:
        """Killed over killed + survived (equivalent mutants cannot be killed)."""
        judged = self.count(KILLED) + self.count(SURVIVED)
        return self.count(KILLED) / judged if judged else None

    @property
    def seconds_per_mutant(self) -> float:
        graded = [result.seconds for result in self.results if result.status != EQUIVALENT]
        return sum(graded) / len(graded) if graded else 0.0

    def text(self) -> str:
        rate = "n/a" if self.kill_rate is None else f"{100 * self.kill_rate:.1f}%"
        sampled = ""
        if len(self.results) < self.generated:
            sampled = f" (--limit {self.limit}, seed {self.seed})" if self.limit else ""
            sampled += f" (shard {self.shard})" if self.shard else ""
            sampled = sampled or " (chosen with --id)"
        lines = [
            f"mutants of {self.module}: {self.generated} generated, {len(self.results)} taken{sampled}"
            + (", graded with the counted performance checks" if self.perf else ""),
            f"killed {self.count(KILLED)}, survived {self.count(SURVIVED)}, equivalent {self.count(EQUIVALENT)}",
            f"kill rate of the non-equivalent: {rate}",
            f"time: {self.seconds:.0f} s ({self.seconds_per_mutant:.1f} s a mutant)",
        ]
        lines += [f"stale equivalent (no longer generated): {mutant_id}" for mutant_id in self.stale]
        survivors = [result.mutant for result in self.results if result.status == SURVIVED]
        if survivors:
            lines.append(f"\n{len(survivors)} survivor(s):")
        for mutant in survivors:
            lines.append(f"\n{mutant.id}\n{mutant.diff().rstrip()}")
        return "\n".join(lines) + "\n"

    def to_dict(self) -> dict[str, Any]:
        return {
            "module": self.module,
            "generated": self.generated,
            "taken": len(self.results),
            "limit": self.limit,
            "seed": self.seed,
            "perf": self.perf,
            "shard": self.shard,
            "killed": self.count(KILLED),
            "survived": self.count(SURVIVED),
            "equivalent": self.count(EQUIVALENT),
            "kill_rate": self.kill_rate,
            "seconds": round(self.seconds, 1),
            "seconds_per_mutant": round(self.seconds_per_mutant, 2),
            "stale": self.stale,
            "mutants": [_result_dict(result) for result in self.results],
        }


def _result_dict(result: Result) -> dict[str, Any]:
    mutant = result.mutant
    data: dict[str, Any] = {"id": mutant.id, "file": mutant.file, "line": mutant.line, "operator": mutant.operator}
    data |= {"replacement": mutant.replacement, "status": result.status, "seconds": round(result.seconds, 2)}
    if result.status == KILLED:
        data["killed_by"] = result.failed[:5]
    if result.status == SURVIVED:
        data["diff"] = mutant.diff()
    if result.status == EQUIVALENT:
        data["reason"] = result.reason
    return data


if __name__ == "__main__":
    serve()
