"""The corpus of broken and hostile submissions (tests/corpus/<module>/<case>.py).

A case is a fragment of code appended to one file of the reference solution (or of the stubs),
so that its definitions override the reference's; its header says what grading it must give:

    \"\"\"One line saying what the submission does wrong.\"\"\"
    # target: ring.py             the file the fragment is appended to
    # select: EXPR                the tests graded (a pytest -k expression)
    # fails: REGEX                exactly the graded tests whose names match must fail ("-": none)
    # kind: timeout               how the first real failure is classified ("" for a wrong answer)
    # message: REGEX              what that failure must tell the student
    # score: 12.5                 optional: the exact score
    # base: stubs                 optional: append to assignments/<module> instead of solutions/
    # time-limit: 2               optional: seconds per call (default TIME_LIMIT_S)
    # needs: landlock             optional: only where the kernel offers Landlock (skipped elsewhere);
                                  "landlock-signals": Landlock that also scopes signals (ABI 6+)
    # append: LINE                optional: a last line appended verbatim (for a file that must not parse)

Every case is graded once, four at a time, each in its own grading process with its own
temporary folder. The tests then prove that the grader finished and reported (in every output
format), failed exactly what the case breaks with a message a student understands (so no cheat
gains a point), and left no process or file behind. Grading the reference's performance checks
five times must give identical scores.
"""

from __future__ import annotations

import base64
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from grader.report import FORMATS, render
from grader.results import PASSED, SKIPPED, GradeReport
from grader.sandbox.landlock import landlock_available, signals_scoped

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "corpus"
MODULES = ("collectives", "zero", "attention", "moe", "kv_cache", "quantization")
TIME_LIMIT_S = 2.0
GRADING_TIMEOUT_S = 300.0  # one whole grading: a safety net far above the slowest (~100 s on a busy machine)
WORKERS = 4  # most of a case's time is spent waiting on hung calls: they overlap well
PERF_RUNS = 5  # gradings of the reference's measured performance checks (the last: solutions_results)
# The performance checks whose verdict depends on the machine: time ratios. The others count
# (bytes by the kernel, operators, FLOPs, tensor sizes) and are proven both ways elsewhere.
PERF_SELECT = "perf and (time_within or at_least_2x)"
HEADER = re.compile(r"^# (target|select|fails|kind|message|score|base|time-limit|needs|append): ?(.*)$")


@dataclass(frozen=True)
class Case:
    module: str
    name: str
    description: str
    target: str
    select: str
    fails: str
    kind: str
    message: str
    score: float | None = None
    base: str = "solutions"
    time_limit_s: float = TIME_LIMIT_S
    needs: str = ""
    append: str = ""

    @property
    def id(self) -> str:
        return f"{self.module}/{self.name}"

    @property
    def path(self) -> Path:
        return CORPUS / self.module / f"{self.name}.py"


def load_case(path: Path) -> Case:
    """A case from its file: the docstring's first line and the `# key: value` header lines."""
    text = path.read_text()
    fields = {m[1]: m[2].strip() for m in map(HEADER.match, text.splitlines()) if m}
    missing = {"target", "select", "fails", "kind", "message"} - fields.keys()
    assert not missing, f"{path}: header lines missing: {sorted(missing)}"
    description = text.split('"""')[1].strip().splitlines()[0]
    return Case(
        module=path.parent.name,
        name=path.stem,
        description=description,
        target=fields["target"],
        select=fields["select"],
        fails=fields["fails"],
        kind=fields["kind"],
        message=fields["message"],
        score=float(fields["score"]) if "score" in fields else None,
        base="assignments" if fields.get("base") == "stubs" else "solutions",
        time_limit_s=float(fields.get("time-limit", TIME_LIMIT_S)),
        needs=fields.get("needs", ""),
        append=fields.get("append", ""),
    )


CASES = [load_case(p) for p in sorted(CORPUS.glob("*/*.py"))]


def build(case: Case, root: Path) -> Path:
    """The case's submission: the base module with the case's code appended to its target."""
    folder = root / case.module
    shutil.copytree(ROOT / case.base / case.module, folder, ignore=shutil.ignore_patterns("*.ipynb", "test_*.py"))
    with open(folder / case.target, "a") as file:
        file.write(f"\n\n# ---- corpus case {case.name} ----\n{case.path.read_text()}")
        if case.append:
            file.write(f"\n{case.append}\n")
    return root


@dataclass
class Graded:
    seconds: float
    returncode: int | None  # None: the grading did not finish within GRADING_TIMEOUT_S
    stderr: str
    out: Path  # the report the grading wrote, read only when checked (a late write would show)


def _grade(case: Case, root: Path, env: dict[str, str]) -> Graded:
    submission = build(case, root / "submission")
    command = [str(submission), case.module, "--select", case.select, "--time-limit", f"{case.time_limit_s:g}"]
    return _run_grading(command, root / "report.json", env)


def _grade_reference_perf(root: Path, env: dict[str, str]) -> Graded:
    return _run_grading([str(ROOT / "solutions"), "--select", PERF_SELECT], root / "report.json", env)


def _run_grading(arguments: list[str], out: Path, env: dict[str, str]) -> Graded:
    """tests/corpus/grade.py ARGUMENTS --out OUT in a session of its own, killed at the timeout."""
    command = [sys.executable, str(CORPUS / "grade.py"), *arguments, "--out", str(out)]
    started = time.monotonic()
    with subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
    ) as process:
        try:
            _, stderr = process.communicate(timeout=GRADING_TIMEOUT_S)
            code: int | None = process.returncode
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            _, stderr = process.communicate()
            code = None
    return Graded(time.monotonic() - started, code, stderr.decode(errors="replace")[-3000:], out)


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The temporary folder every grading of this file runs with (TMPDIR): what is left in it
    afterwards was left by the grader or a worker."""
    return tmp_path_factory.mktemp("corpus-tmp")


@pytest.fixture(scope="module")
def graded(tmp_path_factory: pytest.TempPathFactory, scratch: Path) -> dict[str, Graded]:
    env = {**os.environ, "TMPDIR": str(scratch)}
    env.pop("GRADER_SEED", None)

    def one(job: Case | int) -> Graded:
        if isinstance(job, int):
            return _grade_reference_perf(tmp_path_factory.mktemp(f"perf{job}"), env)
        return _grade(job, tmp_path_factory.mktemp(job.name), env)

    # The reference's performance runs are the longest jobs: they start first, beside the cases.
    jobs: list[Case | int] = [*range(PERF_RUNS - 1), *CASES]
    started, cpu_before = time.monotonic(), _children_cpu_s()
    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        done = list(pool.map(one, jobs))
    results = {f"perf{job}" if isinstance(job, int) else job.id: g for job, g in zip(jobs, done)}
    elapsed = time.monotonic() - started
    timings = ", ".join(f"{name} {g.seconds:.0f}" for name, g in sorted(results.items(), key=lambda r: -r[1].seconds))
    print(
        f"\ncorpus: {len(CASES)} cases and {PERF_RUNS - 1} reference performance runs graded in {elapsed:.0f} s "
        f"({_children_cpu_s() - cpu_before:.0f} CPU s); seconds per job: {timings}"
    )
    return results


def _report(graded: dict[str, Graded], case: Case) -> GradeReport:
    if case.needs == "landlock" and not landlock_available():
        pytest.skip("the kernel offers no Landlock: the worker cannot be denied the hidden suites")
    if case.needs == "landlock-signals" and not signals_scoped():
        pytest.skip("the kernel's Landlock cannot scope signals: a worker can signal the grader")
    result = graded[case.id]
    assert result.returncode is not None, f"grading did not finish within {GRADING_TIMEOUT_S:g} s"
    assert result.returncode == 0, f"the grader exited {result.returncode}:\n{result.stderr}"
    data = json.loads(result.out.read_text())
    assert "modules" in data, f"the report was overwritten by something else: {str(data)[:300]}"
    return GradeReport.from_dict(data)


def test_corpus_has_40_cases_covering_every_module():
    per_module = {m: sum(c.module == m for c in CASES) for m in MODULES}
    assert len(CASES) >= 40, f"only {len(CASES)} cases"
    assert all(per_module.values()), f"modules without a case: {[m for m, n in per_module.items() if not n]}"


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_corpus_case_fails_exactly_what_it_breaks_with_a_clear_message(case: Case, graded):
    report = _report(graded, case)
    problems = [n for n in report.notes if "stopped early" in n or "could not load" in n or "no test was run" in n]
    assert not problems, f"grading did not run normally: {problems}"
    tests = {f"{t.name} ({t.suite})": t for t in report.tests if t.status != SKIPPED}
    assert tests, "no test was graded"
    should_fail = {key for key, t in tests.items() if case.fails != "-" and re.search(case.fails, t.name)}
    failed = {name for name, t in tests.items() if t.status != PASSED}
    assert should_fail or case.fails == "-", f"no graded test matches {case.fails!r}; graded: {sorted(tests)}"
    wrongly_failed, wrongly_passed = sorted(failed - should_fail), sorted(should_fail - failed)
    assert not wrongly_passed, f"passed but should fail (a cheat or bug got through): {wrongly_passed}"
    assert not wrongly_failed, f"failed but should pass: {wrongly_failed}\n" + "\n".join(
        f"{n}: {tests[n].message[:400]}" for n in wrongly_failed[:3]
    )
    if not should_fail:
        return
    first = next((tests[n] for n in sorted(should_fail) if not tests[n].message.startswith("not run:")), None)
    assert first is not None, "every failure says 'not run': the first real failure is missing"
    assert first.kind == case.kind, f"kind {first.kind!r}, expected {case.kind!r}:\n{first.message}"
    assert re.search(case.message, first.message), f"message does not match {case.message!r}:\n{first.message}"
    if case.score is not None:
        assert report.score == pytest.approx(case.score, abs=0.01)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_corpus_case_is_reported_in_every_format(case: Case, graded):
    report = _report(graded, case)
    graded_tests = [t for t in report.tests if t.status != SKIPPED]
    rendered = {fmt: render(report, fmt) for fmt in FORMATS}
    assert f"{report.score:.1f} / {report.max_score:g}" in rendered["text"]
    for fmt in ("json", "gradescope"):
        data = json.loads(rendered[fmt])
        assert len(data["tests"]) == len(graded_tests), fmt
        assert data["score"] == pytest.approx(report.score, abs=0.01), fmt
    cases = ET.fromstring(rendered["junit"]).iter("testcase")
    assert sum(1 for _ in cases) == len(report.tests)
    classroom = json.loads(base64.b64decode(rendered["classroom"]))
    assert len(classroom["tests"]) == len(graded_tests)
    assert sum(t["score"] for t in classroom["tests"]) == pytest.approx(report.score, abs=0.05)


def _processes_using(folder: Path) -> list[str]:
    """Processes whose environment names `folder` as TMPDIR (the gradings' descendants)."""
    marker = f"TMPDIR={folder}".encode()
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if marker in (proc / "environ").read_bytes().split(b"\0"):
                command = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                found.append(f"{proc.name}: {command[:200]}")
        except OSError:
            continue
    return found


def test_corpus_leaves_no_process_or_temporary_file_behind(graded, scratch):
    assert all(g.returncode is not None for g in graded.values()), "a grading was killed: see its case"
    deadline = time.monotonic() + 5  # a process killed a moment ago may still be exiting
    while (left := _processes_using(scratch)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left, "processes left running after grading:\n" + "\n".join(left)
    # torch keeps its compile cache in TMPDIR (torchinductor_<user>); everything else is ours.
    leftovers = sorted(p.name for p in scratch.iterdir() if not p.name.startswith("torchinductor_"))
    assert not leftovers, f"files left in the temporary folder: {leftovers[:10]}"


def test_reference_passes_the_measured_performance_checks_five_times_in_a_row(graded, solutions_results):
    """Performance checks never flip: the time-ratio checks are graded 4 times beside the corpus
    (under its load) and a 5th time in the full grading of the solutions, passing every time."""
    runs = []
    for run in range(PERF_RUNS - 1):
        result = graded[f"perf{run}"]
        assert result.returncode == 0, f"run {run + 1}: the grader exited {result.returncode}:\n{result.stderr}"
        report = GradeReport.from_dict(json.loads(result.out.read_text()))
        runs.append({f"{t.module}: {t.name}": (t.status, t.message[:300]) for t in report.tests if t.status != SKIPPED})
    measured = set(runs[0])
    full = {t["name"]: (t["status"], t["output"][:300]) for t in solutions_results["tests"] if t["name"] in measured}
    assert set(full) == measured, f"not in the full grading: {sorted(measured - set(full))}"
    runs.append(full)
    for number, run in enumerate(runs, 1):
        failing = [f"{name}: {message}" for name, (status, message) in run.items() if status != PASSED]
        assert not failing, f"run {number}: the reference failed performance checks:\n" + "\n".join(failing)
    assert all(set(run) == measured for run in runs), "different checks ran in different runs"
