"""The grader off Linux (grader/system): the portable layer, forced here with GRADER_PORTABLE=1,
runs the student's loop as it runs on macOS, and says what it cannot measure.

What a Mac changes and these tests prove on Linux: no per-process byte counts (a check on bytes
gives no verdict and no points, and says why), deadlocks found by CPU stillness instead of byte
stillness, no sandbox (every report says so, a class's grading refuses), processes found with
psutil instead of the proc file system. What only a Mac can show (fork safety after torch is
imported, the Objective-C runtime, `lo0`) is listed in README.md, "Supported systems".
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT, by_name, run_grader
from test_watch import _until

from grader.perf import NO_TRITON, NOT_COUNTED
from grader.system import UNSANDBOXED, linux, portable

PORTABLE = {"GRADER_PORTABLE": "1"}
CORPUS = ROOT / "tests" / "corpus"


def _grade_portably(submission: Path, module: str, select: str, out: Path) -> tuple[subprocess.CompletedProcess, dict]:
    completed = run_grader(
        "grade", "--submission", str(submission), module, "-k", select, "--format", "json", "--out", str(out),
        env=PORTABLE,
    )  # fmt: skip
    assert out.is_file(), f"the portable grading wrote no report:\n{completed.stderr[-3000:]}"
    return completed, json.loads(out.read_text())


def test_proc_and_prctl_appear_only_in_the_linux_layer():
    """Everything the grader asks of Linux alone goes through grader/system/linux.py (and the
    Landlock sandbox): no other file of the grader reads the proc file system or calls prctl."""
    allowed = {ROOT / "grader" / "system" / "linux.py", ROOT / "grader" / "sandbox" / "landlock.py"}
    linux_only = re.compile(r"/proc\b|\bprctl\b")
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in sorted((ROOT / "grader").rglob("*.py"))
        if path not in allowed
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if linux_only.search(line)
    ]
    assert not found, "Linux-only calls outside grader/system/linux.py:\n" + "\n".join(found)


def test_both_layers_see_the_same_processes_descriptors_and_cpu_time(tmp_path):
    """The portable layer (psutil, /dev/fd) and the Linux one (the proc file system) agree on a
    child process, this process's files and threads, and the CPU time spent; the portable one
    counts no bytes (None), as on macOS."""
    marker = f"GRADER_TEST_MARK={tmp_path.name}"
    child = subprocess.Popen(["sleep", "30"], env={**os.environ, marker.split("=")[0]: tmp_path.name})
    try:
        time.sleep(0.2)
        for layer in (linux, portable):
            assert layer.processes_with_environment(marker) == [child.pid], layer.NAME
            assert child.pid in layer.descendants(os.getpid()), layer.NAME
            assert layer.is_running(child.pid), layer.NAME
        with open(tmp_path / "file", "w") as file:
            for layer in (linux, portable):
                assert file.fileno() in layer.open_descriptors(), layer.NAME
                assert layer.descriptor_path(file.fileno()) == str(tmp_path / "file"), layer.NAME
        before, portable_count, after = linux.thread_count(), portable.thread_count(), linux.thread_count()
        assert min(before, after) <= portable_count <= max(before, after), (before, portable_count, after)
        assert abs(linux.process_cpu_s(os.getpid()) - portable.process_cpu_s(os.getpid())) < 0.5
        assert abs(linux.machine_busy_s() - portable.machine_busy_s()) < 5.0
        assert linux.bytes_written(os.getpid()) > 0 and portable.bytes_written(os.getpid()) is None
    finally:
        child.kill()
        child.wait()
    for layer in (linux, portable):
        assert not layer.is_running(child.pid), f"{layer.NAME}: a reaped process still runs"


@pytest.fixture(scope="module")
def without_triton(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The reference of kv_cache (paged tests) and attention (Triton and causal tests) graded in
    one portable grading where Triton cannot be imported, as on macOS: a package of that name on
    PYTHONPATH fails to import, as a missing one does."""
    folder = tmp_path_factory.mktemp("no-triton")
    (folder / "triton").mkdir()
    (folder / "triton" / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'triton'\", name='triton')\n"
    )
    out = folder / "report.json"
    select = "paged or triton_matches_sdpa_in_the_interpreter or causal"
    run_grader(
        "grade", "--submission", str(ROOT / "solutions"), "kv_cache", "attention", "-k", select, "--format", "json",
        "--out", str(out), env={**PORTABLE, "PYTHONPATH": str(folder)},
    )  # fmt: skip
    assert out.is_file(), "the portable grading wrote no report"
    return json.loads(out.read_text())


def test_a_single_process_module_scores_in_full_and_the_report_says_it_was_not_sandboxed(without_triton):
    tests = {name: t for name, t in by_name(without_triton).items() if t["name"].startswith("kv_cache")}
    assert tests and all(t["status"] == "passed" for t in tests.values()), tests
    assert UNSANDBOXED in without_triton["output"], without_triton["output"]


def test_triton_kernels_where_triton_cannot_be_installed_give_no_verdict_and_say_why(without_triton):
    """Triton has no build for macOS: there, a check that runs a Triton kernel cannot run, which
    is no fault of the submission. It gives no verdict and no points, and says so; the checks
    that need no Triton are graded as ever."""
    tests = {name: t for name, t in by_name(without_triton).items() if t["name"].startswith("attention")}
    triton = [t for name, t in tests.items() if "triton" in name]
    others = [t for name, t in tests.items() if "triton" not in name]
    assert triton and all(t["extra_data"]["kind"] == "unmeasured" and NO_TRITON in t["output"] for t in triton), triton
    assert others and all(t["status"] == "passed" for t in others), others


def test_a_deadlock_is_found_by_cpu_stillness_and_bytes_checks_give_no_verdict_and_say_why(tmp_path):
    """A ring whose ranks all receive first deadlocks: with no byte counts, the portable layer
    finds it as Linux does, in about a second (no rank uses CPU, the stacks decide). The
    reference's checks of bytes sent give no verdict and no points, each saying why, and the
    scoreboard sends the student to Linux, not to a rerun."""
    submission = tmp_path / "submission"
    shutil.copytree(ROOT / "solutions" / "collectives", submission / "collectives")
    case = (CORPUS / "collectives" / "deadlock_receive_first.py").read_text()
    with open(submission / "collectives" / "ring.py", "a") as ring:
        ring.write(f"\n\n{case}")
    started = time.monotonic()
    _, report = _grade_portably(submission, "collectives", "sums_in_place[2]", tmp_path / "deadlock.json")
    (test,) = by_name(report).values()
    assert test["extra_data"]["kind"] == "deadlock" and "deadlocked: every rank waited" in test["output"], test
    assert time.monotonic() - started < 60, "the deadlock waited for the time limit instead of being found"

    _, report = _grade_portably(ROOT / "solutions", "collectives", "bandwidth_bound", tmp_path / "b.json")
    tests = by_name(report)
    unmeasured = [t["extra_data"]["kind"] == "unmeasured" and NOT_COUNTED in t["output"] for t in tests.values()]
    assert unmeasured and all(unmeasured), tests
    assert report["score"] == 0.0 and "check(s) not measured on this system (each says why)" in report["output"]
    text = run_grader("grade", "--submission", str(ROOT / "solutions"), "collectives", "-k", "allgather_sends_at_most",
                      env=PORTABLE)  # fmt: skip
    assert "grade on Linux: 1 check(s) not measured on this system" in text.stdout, text.stdout[-3000:]
    assert "rerun" not in text.stdout.split("note:")[0], text.stdout[-3000:]


def test_watch_grades_again_after_a_save_through_the_portable_layer(tmp_path):
    folder = tmp_path / "submission" / "collectives"
    shutil.copytree(ROOT / "assignments" / "collectives", folder, ignore=shutil.ignore_patterns("*.ipynb"))
    command = [sys.executable, "-m", "grader", "watch", "collectives", "--submission", str(folder.parent)]
    command += ["-k", "allreduce_time", "--max-gradings", "2"]
    environment = {**os.environ, **PORTABLE}
    with subprocess.Popen(
        command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=environment
    ) as watch:
        try:
            assert "0.0 / 100" in _until(watch.stdout, "watching")
            written = folder / "cost_model.py"
            shutil.copy(ROOT / "solutions" / "collectives" / "cost_model.py", written)
            os.utime(written)
            second = _until(watch.stdout, "watching")
            assert "100.0 / 100" in second, second
            assert watch.wait(timeout=60) == 0
        finally:
            watch.kill()


def test_windows_gets_one_line_sending_it_to_wsl2():
    """`python -m grader` on Windows proper (sys.platform win32) refuses in one line, exit 2."""
    pretend = "import sys, runpy; sys.platform = 'win32'; sys.argv = ['grader', 'list']; "
    pretend += "runpy.run_module('grader', run_name='__main__')"
    completed = subprocess.run([sys.executable, "-c", pretend], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert completed.returncode == 2, completed
    assert completed.stderr.strip().count("\n") == 0 and "WSL2" in completed.stderr, completed.stderr


def test_a_class_is_not_graded_where_submissions_cannot_be_sandboxed(tmp_path):
    (tmp_path / "class" / "alice").mkdir(parents=True)
    completed = run_grader("batch", "--submissions", str(tmp_path / "class"), "--out", str(tmp_path / "out"),
                           "collectives", env=PORTABLE)  # fmt: skip
    assert completed.returncode == 2, completed
    lines = completed.stderr.strip().splitlines()
    assert len(lines) == 1 and "needs submissions sandboxed" in lines[0], completed.stderr
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_the_dev_container_installs_the_course_with_the_makefiles_own_step():
    """.devcontainer/devcontainer.json (Codespaces, VS Code) installs through the Makefile's
    install target, on a Linux image, and points the editor at the interpreter it creates."""
    config = json.loads((ROOT / ".devcontainer" / "devcontainer.json").read_text())
    command = config["postCreateCommand"].split()
    assert command[0] == "make", command
    dry_run = subprocess.run(["make", "-n", *command[1:]], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert dry_run.returncode == 0, f"{config['postCreateCommand']!r} is no target of the Makefile: {dry_run.stderr}"
    assert "bookworm" in config["image"] or "ubuntu" in config["image"], config["image"]
    assert config["customizations"]["vscode"]["settings"]["python.defaultInterpreterPath"] == ".venv/bin/python"


def test_a_child_a_worker_started_dies_with_the_world_when_no_marker_can_be_seen(monkeypatch):
    """On macOS a process forked without an exec keeps the environment block its worker started
    with, so the world's marker cannot find it; the portable layer kills every descendant of
    the world's workers as well. Here the marker is made invisible (as there) and only that
    path is left to kill a worker's child."""
    import psutil

    import grader.system
    from grader.sandbox import Library

    monkeypatch.setattr(grader.system, "processes_with_environment", lambda entry: [])
    monkeypatch.setattr(grader.system, "unmarked_descendants", portable.unmarked_descendants)
    library = Library()
    try:
        # in a session of its own, out of reach of its worker's process group; return_result=False:
        # a Popen object cannot be sent back
        library.run("subprocess:Popen", (["sleep", "60"],), {"start_new_session": True}, return_result=False)
        workers = [p for p in psutil.Process().children(recursive=True) if _command(p)[:1] == ["sleep"]]
        assert workers, "the worker's child did not start"
    finally:
        library.close()
    time.sleep(0.2)
    alive = [p.pid for p in workers if portable.is_running(p.pid)]  # neither gone nor a zombie
    assert not alive, f"children of a world's worker outlived it: {alive}"


def _command(process) -> list[str]:
    """A process's command line; [] for one that has ended (the test session's other children)."""
    import psutil

    try:
        return process.cmdline()
    except psutil.Error:
        return []
