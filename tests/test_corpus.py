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
                                  "landlock-signals": Landlock that also scopes signals (ABI 6+);
                                  "promtool": only where Prometheus' promtool is on the PATH
    # append: LINE                optional: a last line appended verbatim (for a file that must not parse)

Every case is graded once. The cases of a module are graded one after another in one grading
process (sharing its imports and its zygote), a few modules at a time; each such process first
grades the reference on the same tests and sets no call's time limit below a few times the
reference's slowest test, so that a case's short limit grows with the machine's load instead of
failing a correct call on a busy machine. Cases graded on timed checks run first, alone:
a busy machine gives a timed check no verdict (grader/perf.py). The tests then prove that the
grader finished and reported (in every output format), failed exactly what the case breaks with
a message a student understands (so no cheat gains a point), and left no process or file behind.
The reference's timed checks, graded twice under the corpus's load and once more alone (the
session's reference_timed_results), never fail.
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
from conftest import TIMED_SELECT, grade_the_solutions_in_the_background

from grader.perf import TIMED_CHECK_WORDS
from grader.report import FORMATS, render
from grader.results import PASSED, SKIPPED, UNMEASURED, GradeReport
from grader.sandbox.landlock import landlock_available, signals_scoped

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "corpus"
MODULES = (
    "collectives", "zero", "attention", "moe", "kv_cache", "quantization",
    "tensor_parallel", "pipeline_parallel", "scaling", "serving", "context_parallel", "parallel_4d", "cluster",
    "reliability", "orchestration", "post_training",
)  # fmt: skip
TIME_LIMIT_S = 2.0
CALIBRATION_FACTOR = 3.0  # no call's limit below 3x the slowest test of the reference, same process
CASES_PER_BATCH = 10  # cases calibrated by one grading of the reference
PROCESS_TIMEOUT_S = 900.0  # one grading process: a safety net far above the slowest (~100 s)
WORKERS = 4  # grading processes at once, each with one reference run: hung calls overlap well
PERF_RUNS = 3  # gradings of the reference's timed checks (the last: reference_timed_results, alone)
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

    @property
    def timed(self) -> bool:
        """Whether the case is graded on a timed check (which needs a quiet machine)."""
        return any(word in self.select for word in TIMED_CHECK_WORDS)


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
    seconds: float  # of the whole grading process the case was graded in
    returncode: int | None  # of that process; None: it did not finish within PROCESS_TIMEOUT_S
    stderr: str
    out: Path  # the report the grading wrote, read only when checked (a late write would show)


def _job(submission: Path, modules: list[str], select: str | None, limit: float | None, out: Path) -> dict:
    return {"submission": str(submission), "modules": modules, "select": select, "time_limit_s": limit, "out": str(out)}


def _case_job(case: Case, root: Path) -> dict:
    return _job(build(case, root / "submission"), [case.module], case.select, case.time_limit_s, root / "report.json")


def _calibration(cases: list[Case]) -> dict:
    """Grade the reference first on every test the cases are graded on (see grade.py)."""
    select = " or ".join(f"({c.select})" for c in cases)
    reference = str(ROOT / "solutions")
    return {"submission": reference, "modules": [cases[0].module], "select": select, "factor": CALIBRATION_FACTOR}


def _run_process(plan: dict, folder: Path, env: dict[str, str]) -> Graded:
    """tests/corpus/grade.py PLAN in a session of its own, killed at the timeout."""
    plan_file = folder / "plan.json"
    plan_file.write_text(json.dumps(plan))
    started = time.monotonic()
    with subprocess.Popen(
        [sys.executable, str(CORPUS / "grade.py"), str(plan_file)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    ) as process:
        try:
            _, stderr = process.communicate(timeout=PROCESS_TIMEOUT_S)
            code: int | None = process.returncode
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            _, stderr = process.communicate()
            code = None
    return Graded(time.monotonic() - started, code, stderr.decode(errors="replace")[-3000:], folder / "report.json")


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The temporary folder every grading of this file runs with (TMPDIR): what is left in it
    afterwards was left by the grader or a worker."""
    return tmp_path_factory.mktemp("corpus-tmp")


def _batches(cases: list[Case]) -> list[list[Case]]:
    """The cases of each module in groups of at most CASES_PER_BATCH."""
    batches = []
    for module in MODULES:
        of_module = [c for c in cases if c.module == module]
        batches += [of_module[i : i + CASES_PER_BATCH] for i in range(0, len(of_module), CASES_PER_BATCH)]
    return batches


def _share(batches: list[list[Case]], processes: int) -> list[list[list[Case]]]:
    """Batches dealt to processes, largest first to the least loaded (a case that hangs counts 3)."""
    shares: list[list[list[Case]]] = [[] for _ in range(processes)]
    load = [0] * processes
    for batch in sorted(batches, key=lambda b: -sum(1 + 2 * (c.kind == "timeout") for c in b)):
        least = load.index(min(load))
        shares[least].append(batch)
        load[least] += sum(1 + 2 * (c.kind == "timeout") for c in batch)
    return shares


@pytest.fixture(scope="module")
def graded(tmp_path_factory: pytest.TempPathFactory, scratch: Path) -> dict[str, Graded]:
    """Every case graded, and the reference's timed checks PERF_RUNS - 1 times under load. First
    the timed cases, in one process of their own, alone; then one grading process per worker
    slot runs one reference run and its share of module batches (each calibrated first), while
    the solutions' full grading starts beside them (conftest.py)."""
    env = {**os.environ, "TMPDIR": str(scratch)}
    env.pop("GRADER_SEED", None)
    folders = {case.id: tmp_path_factory.mktemp(case.name) for case in CASES}

    def run(name: str, perf_run: bool, batches: list[list[Case]], calibrate: bool) -> dict[str, Graded]:
        folder = tmp_path_factory.mktemp(name)
        groups = []
        if perf_run:
            reference = _job(ROOT / "solutions", [], TIMED_SELECT, None, folder / "report.json")
            groups.append({"calibrate": None, "jobs": [reference]})
        for batch in batches:
            jobs = [_case_job(c, folders[c.id]) for c in batch]
            if not calibrate:  # a case graded on timed checks does not hang: the module's own limit
                jobs = [{**job, "time_limit_s": None} for job in jobs]
            groups.append({"calibrate": _calibration(batch) if calibrate else None, "jobs": jobs})
        process = _run_process({"groups": groups}, folder, env)
        cases = {c.id: Graded(**{**vars(process), "out": folders[c.id] / "report.json"}) for b in batches for c in b}
        return {**cases, **({name: process} if perf_run else {})}

    shares = _share(_batches([c for c in CASES if not c.timed]), WORKERS)
    started, cpu_before = time.monotonic(), _children_cpu_s()
    results = run("timed", False, _batches([c for c in CASES if c.timed]), False)  # alone: quiet
    grade_the_solutions_in_the_background(tmp_path_factory)  # beside the rest (conftest.py)
    loaded = time.monotonic()
    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        for done in pool.map(lambda i: run(f"perf{i}", i < PERF_RUNS - 1, shares[i], True), range(WORKERS)):
            results.update(done)
    under_load = time.monotonic() - loaded
    processes = {(g.seconds, g.returncode): name for name, g in results.items() if name.startswith("perf")}
    print(
        f"\ncorpus: {len(CASES)} cases and {PERF_RUNS - 1} reference performance runs graded in "
        f"{time.monotonic() - started:.0f} s, {under_load:.0f} s of them in parallel "
        f"({_children_cpu_s() - cpu_before:.0f} CPU s); seconds per process: "
        + ", ".join(f"{name} {key[0]:.0f}" for key, name in processes.items())
    )
    return results


def _report(graded: dict[str, Graded], case: Case) -> GradeReport:
    if case.needs == "landlock" and not landlock_available():
        pytest.skip("the kernel offers no Landlock: the worker cannot be denied the hidden suites")
    if case.needs == "landlock-signals" and not signals_scoped():
        pytest.skip("the kernel's Landlock cannot scope signals: a worker can signal the grader")
    if case.needs == "promtool" and shutil.which("promtool") is None:
        pytest.skip("no promtool on the PATH (Debian's prometheus package): the alerting-rule tests skip")
    result = graded[case.id]
    assert result.returncode is not None, f"its grading process did not finish within {PROCESS_TIMEOUT_S:g} s"
    assert result.returncode == 0, f"its grading process exited {result.returncode}:\n{result.stderr}"
    assert result.out.is_file(), "the grading wrote no report"
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
    if first.kind == UNMEASURED and case.timed:  # no verdict either way: the machine was busy
        pytest.skip(f"{first.name}: {first.message}")
    assert first.kind == case.kind, f"kind {first.kind!r}, expected {case.kind!r}:\n{first.message}"
    assert re.search(case.message, first.message), f"message does not match {case.message!r}:\n{first.message}"
    if first.kind != "not_implemented":  # inputs are random per grading: the seed replays them
        replay = rf"\nreplay: GRADER_SEED=\d+ make grade ARGS=\"{case.module} -k '{re.escape(first.name)}'\"$"
        assert re.search(replay, first.message), f"the message does not end with its replay line:\n{first.message}"
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
        assert data["score"] == report.score == sum(t["score"] for t in data["tests"]), fmt
        assert sum(t["max_score"] for t in data["tests"]) == report.max_score, fmt
    cases = ET.fromstring(rendered["junit"]).iter("testcase")
    assert sum(1 for _ in cases) == len(report.tests)
    classroom = json.loads(base64.b64decode(rendered["classroom"]))
    assert len(classroom["tests"]) == len(graded_tests)
    assert sum(t["score"] for t in classroom["tests"]) == report.score, "the reporter's sum must be the score"
    assert classroom["max_score"] == report.max_score


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


def test_reference_never_fails_a_timed_check_under_load_and_passes_them_when_measured(graded, reference_timed_results):
    """Timed checks never flip: graded twice beside the corpus (under its load, where most give
    no verdict) and a third time alone, before it (reference_timed_results), the reference's
    timed checks pass or, on a busy machine, are not measured; never do they fail."""
    runs = []
    for run in range(PERF_RUNS - 1):
        result = graded[f"perf{run}"]
        assert result.returncode == 0, f"run {run + 1}: the grader exited {result.returncode}:\n{result.stderr}"
        report = GradeReport.from_dict(json.loads(result.out.read_text()))
        runs.append({f"{t.module}: {t.name}": (t.status, t.message[:300]) for t in report.tests if t.status != SKIPPED})
    measured = set(runs[0])
    alone = {  # Gradescope's statuses are passed and failed: an unmeasured check is told by its kind
        t["name"]: (UNMEASURED if t["extra_data"]["kind"] == UNMEASURED else t["status"], t["output"][:300])
        for t in reference_timed_results["tests"]
    }
    runs.append(alone)
    for number, run in enumerate(runs, 1):
        failing = [f"{name}: {m}" for name, (status, m) in run.items() if status not in (PASSED, UNMEASURED)]
        assert not failing, f"run {number}: the reference failed performance checks:\n" + "\n".join(failing)
        for status, message in run.values():
            assert status == PASSED or message.startswith("not measured reliably"), message
    assert all(set(run) == measured for run in runs), "different checks ran in different runs"
