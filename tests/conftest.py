"""Shared helpers for the project's own tests: run the grader as a user would (a subprocess),
and build broken submissions from the reference solutions plus one variant file.

The session runs in two lanes, so that it fits CI's time on two cores without a timed check
ever being judged on a machine the tests themselves keep busy:
- first, alone: the tests that read a timed verdict (marked `timed`, among them the reference's
  timed checks graded on their own, `reference_timed_results`), then the corpus (which loads the
  machine itself, and grades its timed cases alone first), beside which the solutions are then
  graded in full (`solutions_results`, in a grading server of its own: its timed checks mostly
  give no verdict there, and the tests read the quiet verdicts instead);
- then the rest, the tests that read the solutions' grading last (it is still running when the
  corpus ends), while heavy fixtures of theirs that only run the tools (nbgrader's round trip,
  the notebooks, the class of the batch tests, ...) are computed one after another in the
  background (`prefetched`): a test that needs one before it started computes it itself.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from grader.course import load_solution  # noqa: F401  (the project tests import it from here)
from grader.perf import TIMED_CHECK_WORDS

# One OpenMP thread in this process and in every process it starts (grading servers, notebook
# kernels, figure scripts, torchrun's workers): the session keeps both cores busy with processes,
# and a torch operator split over 2 threads while another process holds a core spins at every
# barrier, waiting for its descheduled thread. Measured here: the scaling notebook beside one
# busy process took 159 s (156 CPU s) with 2 threads and 27 s with 1 (20 s alone). The grader's
# workers run with 1 already (grader/sandbox/zygote.py). Set before anything imports torch.
os.environ.setdefault("OMP_NUM_THREADS", "1")

ROOT = Path(__file__).resolve().parent.parent
VARIANTS = Path(__file__).resolve().parent / "variants"
ALONE_THEN = ("test_corpus",)  # after the timed tests, before the background starts
# The performance checks whose verdict depends on the machine: time ratios (grader/perf.py). The
# others count (bytes by the kernel, operators, FLOPs, tensor sizes) and are proven both ways elsewhere.
TIMED_SELECT = f"perf and ({' or '.join(TIMED_CHECK_WORDS)})"
# The solutions' full grading runs beside the corpus's load: a correct call gets this long, not
# course.toml's 30 s (the corpus proves the limits; here a slow call must never fail).
LOADED_TIME_LIMIT_S = 300


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "timed: reads a timed check's verdict: runs first, on a quiet machine")


def _lane(item: pytest.Item) -> int:
    if item.get_closest_marker("timed"):
        return 0
    return 1 if item.path.stem in ALONE_THEN else 2


def _waits_for_the_solutions(item: pytest.Item) -> bool:
    """Whether the test reads the solutions' full grading: the last lane runs those last, so
    that the rest of it runs while that grading finishes."""
    return _lane(item) == 2 and "solutions_results" in getattr(item, "fixturenames", ())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # stable: files and tests keep their order within a lane
    items.sort(key=lambda item: (_lane(item), _waits_for_the_solutions(item)))


_BACKGROUND = ThreadPoolExecutor(max_workers=1, thread_name_prefix="prefetch")
_PREFETCHED: dict[str, tuple[Callable[[Path], Any], Future | None]] = {}
_BESIDE_THE_CORPUS = ThreadPoolExecutor(max_workers=1, thread_name_prefix="solutions")
_SOLUTIONS: list[Future] = []


def prefetched(function: Callable[[Path], Any]) -> Callable[[pytest.TempPathFactory], Any]:
    """Register `function(folder)` (of a test file) to run in the background once the last lane
    begins, if a test of its file was collected; the returned getter gives its result (computing
    it now if it had not started)."""
    key = f"{function.__module__}.{function.__qualname__}"
    _PREFETCHED[key] = (function, None)

    def get(factory: pytest.TempPathFactory) -> Any:
        job, future = _PREFETCHED[key]
        if future is None or future.cancel():
            return job(factory.mktemp(job.__name__))
        return future.result()

    return get


def grade_the_solutions_in_the_background(factory: pytest.TempPathFactory) -> None:
    """Start the solutions' full grading (solutions_results) in a thread of its own, once: the
    corpus starts it after its timed cases, the last lane if the corpus is not run and a test
    of that lane reads it."""
    if not _SOLUTIONS:
        _SOLUTIONS.append(_BESIDE_THE_CORPUS.submit(_grade_solutions, factory.mktemp("solutions")))


def pytest_runtest_setup(item: pytest.Item) -> None:
    if _lane(item) < 2 or any(future for _, future in _PREFETCHED.values()):
        return
    factory = item.config._tmp_path_factory  # the session's tmp_path_factory, from a hook
    if any(_waits_for_the_solutions(test) for test in item.session.items):
        grade_the_solutions_in_the_background(factory)
    wanted = {test.path.stem for test in item.session.items}
    for key, (job, _) in _PREFETCHED.items():
        if job.__module__ in wanted:
            _PREFETCHED[key] = (job, _BACKGROUND.submit(job, factory.mktemp(job.__name__)))


def pytest_sessionfinish(session: pytest.Session) -> None:
    _BACKGROUND.shutdown(cancel_futures=True)
    _BESIDE_THE_CORPUS.shutdown(cancel_futures=True)


def run_grader(*args: str, timeout: float = 900, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`python -m grader ARGS` from the repository root, output captured."""
    return subprocess.run(
        [sys.executable, "-m", "grader", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


class GradingServer:
    """tests/grading_server.py: `python -m grader ARGS` answered by one process for the session."""

    def __init__(self) -> None:
        self.log = tempfile.TemporaryFile()  # noqa: SIM115 - open for the life of the server
        self.process = subprocess.Popen(
            [sys.executable, str(ROOT / "tests" / "grading_server.py")],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
        )

    def run(self, args: list[str], timeout: float) -> tuple[int, str]:
        """The exit status of `python -m grader ARGS`, and what it wrote to standard error."""
        start = self.log.seek(0, os.SEEK_END)
        self.process.stdin.write(json.dumps(args) + "\n")
        self.process.stdin.flush()
        timer = threading.Timer(timeout, self.process.kill)
        timer.start()
        try:
            while (line := self.process.stdout.readline()) and not line.startswith("GRADED "):
                continue
        finally:
            timer.cancel()
        self.log.seek(start)
        stderr = self.log.read().decode(errors="replace")
        if not line:
            raise AssertionError(f"the grading server died (or ran past {timeout:g} s):\n{stderr[-3000:]}")
        return int(line.split()[1]), stderr

    def close(self) -> None:
        """End the server; a grading it is still running (the solutions' background grading,
        when a run of a few test files ends before it) is stopped."""
        self.process.stdin.close()
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()


# Two servers: the solutions' full grading (minutes, a thread of its own) has one to itself, so
# that the other gradings (variants, stubs) never queue behind it.
_SERVERS: dict[str, GradingServer] = {}
_SERVER_LOCKS = {"main": threading.Lock(), "solutions": threading.Lock()}


@pytest.fixture(scope="session", autouse=True)
def _close_the_grading_servers():
    yield
    for server in _SERVERS.values():
        server.close()


def grade_json(submission: Path | str, *args: str, out: Path, timeout: float = 900, server: str = "main") -> dict:
    """Grade and return the Gradescope-shaped results; fail with the grader's output if it broke.
    Runs `python -m grader grade` in one of the session's grading servers (the CLI, in one
    process): "main", or "solutions" for the solutions' full grading."""
    command = ["grade", "--submission", str(submission), "--format", "json", "--out", str(out), *args]
    with _SERVER_LOCKS[server]:  # one grading at a time in each server
        if server not in _SERVERS or _SERVERS[server].process.poll() is not None:
            _SERVERS[server] = GradingServer()
        code, stderr = _SERVERS[server].run(command, timeout)
    assert code == 0, f"grader exited {code}:\n{stderr[-3000:]}"
    return json.loads(out.read_text())


def by_name(results: dict) -> dict[str, dict]:
    """Tests of a Gradescope result keyed by their name without the module prefix."""
    return {t["name"].split(": ", 1)[1]: t for t in results["tests"]}


def module_results(results: dict, module: str) -> dict[str, dict]:
    """One module's tests of a Gradescope result (e.g. the session's solutions_results), by name."""
    return {t["name"].split(": ", 1)[1]: t for t in results["tests"] if t["name"].startswith(f"{module}: ")}


def measured(test: dict) -> dict:
    """A timed check's result; the calling test is skipped, with the reason, when the machine was
    too busy to time it (grader/perf.py): a timed check can be proved both ways only when it can
    be measured, and it must never get the wrong verdict."""
    if test["output"].startswith("not measured reliably"):
        pytest.skip(f"{test['name']}: {test['output']}")
    return test


def build_variant(module: str, variant: str, root: Path) -> Path:
    """A submission folder: solutions/<module> with tests/variants/<module>/<variant>.py appended
    to the file its `# target:` line names (later definitions override the reference's)."""
    code = (VARIANTS / module / f"{variant}.py").read_text()
    target = next(line.split(":", 1)[1].strip() for line in code.splitlines() if line.startswith("# target:"))
    folder = root / module
    shutil.copytree(ROOT / "solutions" / module, folder)
    with open(folder / target, "a") as file:
        file.write(f"\n\n# ---- variant {variant} ----\n{code}")
    return root


def grade_variant(module: str, tmp_path: Path, variant: str, select: str, *options: str) -> dict[str, dict]:
    """tests/variants/<module>/<variant>.py graded on the tests `select` picks: its results by name."""
    submission = build_variant(module, variant, tmp_path / "submission")
    return by_name(grade_json(submission, module, "--select", select, *options, out=tmp_path / "r.json"))


def assert_only_failing(tests: dict[str, dict], *failing: str) -> None:
    """Tests whose name starts with one of `failing` failed; every other selected test passed."""
    assert tests, "no test was selected"
    for name, test in tests.items():
        if name.startswith(failing):
            assert test["status"] == "failed", name
        else:
            assert test["status"] == "passed", f"{name}: {test['output']}"


def _grade_solutions(folder: Path) -> dict:
    return grade_json(
        ROOT / "solutions", "--time-limit", str(LOADED_TIME_LIMIT_S), out=folder / "results.json", server="solutions"
    )


@pytest.fixture(scope="session")
def solutions_results(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The reference solutions graded in full (public + hidden + performance), beside the corpus
    (grade_the_solutions_in_the_background): its timed checks may give no verdict, see
    reference_timed_results for theirs."""
    if _SOLUTIONS:
        return _SOLUTIONS[0].result()
    return _grade_solutions(tmp_path_factory.mktemp("solutions"))


@pytest.fixture(scope="session")
def reference_timed_results(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The reference's timed checks graded on their own, in the timed lane (a quiet machine)."""
    out = tmp_path_factory.mktemp("reference-timed") / "results.json"
    return grade_json(ROOT / "solutions", "--select", TIMED_SELECT, out=out)


@pytest.fixture(scope="session")
def stubs_results(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The generated stubs (assignments/) graded in full."""
    return grade_json(ROOT / "assignments", out=tmp_path_factory.mktemp("stubs") / "results.json")
