"""`python -m grader batch`: a small class graded in parallel, one grader process per student.

Only a cheap slice of module attention is graded (SELECT), about 3 s per student: the batch
machinery is under test here, not the suites.
"""

from __future__ import annotations

import argparse
import csv
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, prefetched, run_grader

SELECT = "cache_bytes or uses_the_given_scale"
GRADE = ["attention", "--no-perf", "-k", SELECT]
EXPECTED = {
    "ann": {"attention": "100", "total": "100", "max": "100", "status": "graded"},
    "cat": {"attention": "0", "total": "0", "max": "100", "status": "graded"},
    "dan": {"attention": "0", "total": "0", "max": "100", "status": "graded"},
    "fay": {"attention": "", "total": "0", "max": "100", "status": "no module folders found"},
}
CRASH_AT_IMPORT = 'import os\nprint("<script>alert(1)</script>", flush=True)\nos._exit(3)\n'


def make_class(root: Path) -> Path:
    """ann: an nbgrader submitted/ folder with the solutions; cat: a Classroom repository with the
    stubs; dan: a submission folder with the solutions and a file that prints markup and calls
    os._exit at import; fay: no module folder at all."""
    submissions = root / "submissions"
    shutil.copytree(ROOT / "solutions" / "attention", submissions / "ann" / "attention")
    (submissions / "ann" / "attention" / "timestamp.txt").write_text("2026-11-29 12:00:00 UTC\n")
    shutil.copytree(ROOT / "assignments" / "attention", submissions / "cat" / "assignments" / "attention")
    (submissions / "cat" / "README.md").write_text("my course repository\n")
    shutil.copytree(ROOT / "solutions" / "attention", submissions / "dan" / "attention")
    with open(submissions / "dan" / "attention" / "reference.py", "a") as file:
        file.write(CRASH_AT_IMPORT)
    (submissions / "fay").mkdir()
    (submissions / "fay" / "notes.txt").write_text("forgot to submit\n")
    return submissions


def batch(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    completed = run_grader("batch", *args, timeout=300, env=env)
    assert completed.returncode == 0, f"batch exited {completed.returncode}:\n{completed.stdout}\n{completed.stderr}"
    return completed


def grades(out: Path) -> dict[str, dict[str, str]]:
    with open(out / "grades.csv", newline="") as file:
        return {row.pop("student"): row for row in csv.DictReader(file)}


@prefetched
def grade_the_class(root: Path) -> dict:
    """The class graded once with two jobs; grades.csv as that first run wrote it."""
    submissions, out = make_class(root), root / "out"
    completed = batch("--submissions", str(submissions), "--out", str(out), "--jobs", "2", *GRADE)
    return {"submissions": submissions, "out": out, "stdout": completed.stdout, "csv": (out / "grades.csv").read_text()}


@pytest.fixture(scope="module")
def graded(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return grade_the_class(tmp_path_factory)


def test_batch_grades_every_layout_and_a_crashing_student_affects_no_one(graded):
    out = graded["out"]
    assert grades(out) == EXPECTED, f"grades.csv is wrong:\n{graded['csv']}\nbatch said:\n{graded['stdout']}"
    for student in ("ann", "cat", "dan"):
        for name in ("results.json", "feedback.md", "feedback.html"):
            assert (out / student / name).is_file(), f"batch wrote no {student}/{name}"
    assert not (out / "fay").exists(), "a student without module folders got an output folder"
    # dan's printed markup reaches the messages; it must stay text in HTML.
    page = (out / "dan" / "feedback.html").read_text()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page, "dan's crash output is missing from feedback.html"
    assert "<script>" not in page, "a student's printed <script> became markup in feedback.html"
    assert "exited with code 3" in (out / "dan" / "feedback.md").read_text()
    # Hidden tests are named with their verdict, never shown with their source.
    feedback = (out / "cat" / "feedback.md").read_text() + (out / "cat" / "feedback.html").read_text()
    assert "test_attention_uses_the_given_scale" in feedback, "a hidden test is missing from the feedback"
    for path in (ROOT / "grader" / "suites" / "attention").glob("*.py"):
        for line in path.read_text().splitlines():
            code = line.strip()
            if len(code) >= 20 and not code.startswith(("def ", "@", '"', "'", "#", "from ", "import ")):
                assert code not in feedback, f"feedback shows source of the hidden suite {path.name}: {code}"


def test_rerun_skips_graded_students_and_regrades_a_changed_one(graded):
    submissions, out = graded["submissions"], graded["out"]
    common = ["--submissions", str(submissions), "--out", str(out), *GRADE]
    stamps = {s: (out / s / "results.json").stat().st_mtime_ns for s in ("ann", "cat", "dan")}

    again = batch(*common)
    assert "graded 0, skipped 3" in again.stdout, f"a re-run graded again:\n{again.stdout}"
    assert {s: (out / s / "results.json").stat().st_mtime_ns for s in stamps} == stamps
    assert grades(out) == EXPECTED, "grades.csv was not rebuilt from the results on a re-run"

    os.utime(submissions / "cat" / "assignments" / "attention" / "mla.py")  # saved again after grading
    edited = batch(*common)
    assert "graded 1, skipped 2" in edited.stdout and "cat (classroom): graded" in edited.stdout, edited.stdout
    assert grades(out) == EXPECTED, "regrading a student changed the class's grades"


def test_forced_shards_merged_equal_the_unsharded_grades_and_disagreeing_overlaps_are_refused(graded, tmp_path):
    """Both shards run in copies of the graded class: shard 0/2 keeps its current results and
    shard 1/2 is --forced, so it must regrade its students although their results are current."""
    parts = [tmp_path / "part-0", tmp_path / "part-1"]
    for part in parts:
        shutil.copytree(graded["out"], part)
    stamps = {s: (graded["out"] / s / "results.json").stat().st_mtime_ns for s in ("ann", "cat")}
    common = ["--submissions", str(graded["submissions"]), *GRADE, "--jobs", "2"]
    kept = batch(*common, "--out", str(parts[0]), "--shard", "0/2")
    assert "graded 0, skipped 2" in kept.stdout, f"shard 0/2 (ann, dan) regraded:\n{kept.stdout}"
    forced = batch(*common, "--out", str(parts[1]), "--shard", "1/2", "--force")
    assert "graded 1, skipped 0" in forced.stdout, f"--force did not regrade shard 1/2 (cat, fay):\n{forced.stdout}"
    assert (parts[1] / "cat" / "results.json").stat().st_mtime_ns != stamps["cat"], "--force did not regrade cat"
    assert (parts[1] / "ann" / "results.json").stat().st_mtime_ns == stamps["ann"], "shard 1/2 regraded ann"
    assert list(grades(parts[0])) == ["ann", "dan"] and list(grades(parts[1])) == ["cat", "fay"]

    merged = tmp_path / "merged"
    batch("merge", "--out", str(merged), *map(str, parts))
    assert (merged / "grades.csv").read_text() == graded["csv"], "merged shards differ from the unsharded run"
    for student in ("ann", "cat", "dan"):
        assert (merged / student / "feedback.html").is_file(), f"merge did not bring {student}'s feedback"

    # A third part that graded ann differently must be refused, and nothing written.
    other = tmp_path / "other"
    shutil.copytree(parts[0], other)
    text = (other / "grades.csv").read_text().replace("ann,100,100,100", "ann,50,50,100")
    (other / "grades.csv").write_text(text)
    refused = run_grader("batch", "merge", "--out", str(tmp_path / "never"), str(parts[0]), str(other))
    assert refused.returncode == 2 and "'ann'" in refused.stderr, refused.stderr
    assert not (tmp_path / "never").exists(), "a refused merge wrote output"


FORK_AND_HANG = """
import os, time
for _ in range(3):  # 8 processes, each hanging
    os.fork()
open(os.path.join({folder!r}, str(os.getpid())), "w").close()
while True:
    time.sleep(1)
"""


def _alive(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat")
    try:
        return stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie is dead
    except FileNotFoundError:
        return False


def test_a_student_past_the_wall_limit_is_stopped_with_every_process_it_started(tmp_path):
    """The student forks 8 hanging processes at import; the batch stops it at --student-limit and
    none of them outlives it, nor any temporary folder of its grader. A loaded machine may not
    reach the forks within 15 s (the grader imports torch first): then the try is repeated once
    with a 45 s limit. Within 45 s the grader may time out the first test's import and import the
    submission again for the next test: 8 more forks, which must be stopped as well."""
    submissions, pids, temporary = tmp_path / "submissions", tmp_path / "pids", tmp_path / "tmp"
    pids.mkdir()
    temporary.mkdir()
    shutil.copytree(ROOT / "solutions" / "attention", submissions / "zed" / "attention")
    with open(submissions / "zed" / "attention" / "reference.py", "a") as file:
        file.write(FORK_AND_HANG.format(folder=str(pids)))
    for limit in (15, 45):
        out = tmp_path / f"out-{limit}"
        started = time.perf_counter()
        arguments = ("--submissions", str(submissions), "--out", str(out), "--student-limit", str(limit), *GRADE)
        batch(*arguments, env={"TMPDIR": str(temporary)})
        assert time.perf_counter() - started < limit + 45, f"the batch did not stop the hanging student at {limit} s"
        assert grades(out)["zed"] == {
            "attention": "",
            "total": "0",
            "max": "100",
            "status": f"error: grading took longer than {limit} s and was stopped",
        }
        forked = [int(p.name) for p in pids.iterdir()]
        survivors = [pid for pid in forked if _alive(pid)]
        assert not survivors, f"processes the student forked outlived its grading ({limit} s): {survivors}"
        left = sorted(path.name for path in temporary.iterdir())
        assert not left, f"the stopped grading left temporary folders behind: {left} (grade_student in batch.py)"
        if len(forked) >= 8:  # each import forks 8: at least one import reached the forks
            return
        for stale in pids.iterdir():
            stale.unlink()
    pytest.fail(f"only {len(forked)} of 8 forked processes started within 45 s: the machine is too slow for this test")


def test_the_kubernetes_indexed_job_runs_its_shard_of_the_class(tmp_path):
    """The manifest's container command, run by sh as the pod would with its env, grades shard k/N."""
    job = yaml.safe_load((ROOT / "deploy" / "k8s" / "batch-grading-job.yaml").read_text())
    assert job["kind"] == "Job" and job["spec"]["completionMode"] == "Indexed"
    container = job["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["SHARDS"] == str(job["spec"]["completions"]), "SHARDS must equal the Job's completions"
    (tmp_path / "submissions").mkdir()
    script = container["args"][0].replace("/data", str(tmp_path)).replace("python ", f"{sys.executable} ", 1)
    completed = subprocess.run(
        [*container["command"], script],
        cwd=ROOT,
        env={**os.environ, **env, "JOB_COMPLETION_INDEX": "1"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 0, completed.stderr
    assert f"(shard 1/{env['SHARDS']})" in completed.stdout, completed.stdout
    assert (tmp_path / "out" / "part-1" / "grades.csv").is_file(), "pod 1 did not write its part"


def test_graders_run_at_once_share_the_cores_for_torchs_threads(tmp_path, monkeypatch):
    """Each of `jobs` graders gets OMP_NUM_THREADS = cores // jobs (at least 1) and its own TMPDIR;
    an OMP_NUM_THREADS already set is kept (grader_environment in batch.py). The student's grader
    is replaced by a script that prints what it was given."""
    from grader.course import load_course
    from grader.delivery import batch as batch_module

    shown = "import os; print('threads', os.environ['OMP_NUM_THREADS'], 'tmp', os.environ['TMPDIR'])"
    monkeypatch.setattr(batch_module, "_command", lambda *args: [sys.executable, "-c", shown])
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    student = batch_module.Student("ann", tmp_path, tmp_path, "submission")
    options = argparse.Namespace(student_limit=60.0)

    def given(jobs: int) -> str:
        out = tmp_path / f"out-{jobs}"
        batch_module.grade_student(load_course(), student, ["attention"], options, out, jobs)
        return (out / batch_module.LOG).read_text()

    assert given(4).startswith("threads 2 tmp "), given(4)
    assert given(3).startswith("threads 2 tmp "), "8 cores, 3 graders: 2 threads each (rounded down)"
    assert given(16).startswith("threads 1 tmp "), "more graders than cores: still 1 thread each"
    assert "grader-student-" in given(2), "each grader's TMPDIR is a folder of its own"
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert given(4).startswith("threads 3 tmp "), "an OMP_NUM_THREADS set by the caller is kept"
