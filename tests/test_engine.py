"""The grading engine's speed and what it must not trade for it: workers forked from a zygote,
worlds kept after clean failures, stubs answered from their source, and timed checks that give
no verdict on a busy machine."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from grader.course import Function, Module
from grader.perf import (
    CONTENTION_LIMIT,
    NotMeasuredReliably,
    Ratio,
    Timing,
    best_ratio,
    interleaved_ratio,
    require_reliable,
)
from grader.report import render
from grader.results import FAILED, PASSED, UNMEASURED, GradeReport, ModuleResult, TestResult
from grader.sandbox import Group, Library, Submission, SubmissionError
from grader.sandbox.landlock import signals_scoped
from grader.sandbox.pool import World
from grader.sandbox.stubs import stub_message
from grader.sandbox.zygote import WORLD_MARKER, _zygotes

PROBE = '''
import os
import torch


def pid():
    return os.getpid()


def parent():
    return os.getppid()


def signal_parent(number):
    os.kill(os.getppid(), number)


def poison_torch():
    torch.poisoned_by_a_worker = True


def torch_is_poisoned():
    return hasattr(torch, "poisoned_by_a_worker")


def fails(text):
    raise ValueError(text)


def unwritten(x):
    """A stub, as sync writes them."""
    raise NotImplementedError("implement unwritten (lectures/probe.md, section 1)")


class Unbuilt:
    def __init__(self):
        raise NotImplementedError("implement Unbuilt.__init__ (lectures/probe.md, section 1)")
'''

NAMES = ["pid", "parent", "signal_parent", "poison_torch", "torch_is_poisoned", "fails", "unwritten", "Unbuilt"]


def _probe(folder: Path) -> Submission:
    folder.mkdir(parents=True)
    (folder / "probe.py").write_text(PROBE)
    functions = {n: Function(n, "probe.py", "1. Probe") for n in NAMES}
    module = Module("probe", "Probe", "lectures/probe.md", 1, ("probe.py",), functions, 10.0, 2048)
    return Submission(module, folder)


@pytest.fixture
def probe(tmp_path):
    submission = _probe(tmp_path / "probe")
    yield submission
    submission.close()


def _zygote_pid() -> int:
    return _zygotes["cpu"].process.pid


def test_workers_are_forked_from_a_single_threaded_zygote_and_carry_their_worlds_marker():
    world = World(2, submission=None)
    try:
        zygote = _zygote_pid()
        assert len(os.listdir(f"/proc/{zygote}/task")) == 1, "the zygote must have one thread when it forks"
        for worker in world.workers:
            stat = Path(f"/proc/{worker.process.pid}/stat").read_text().rpartition(")")[2].split()
            assert int(stat[1]) == zygote, "a worker's parent is the zygote"
            assert int(stat[3]) == worker.process.pid, "a worker leads a session of its own"
            environment = Path(f"/proc/{worker.process.pid}/environ").read_bytes().split(b"\0")
            assert f"{WORLD_MARKER}={world.workdir}".encode() in environment
            assert Path(f"/proc/{worker.process.pid}/cwd").resolve() == world.workdir.resolve()
    finally:
        world.close()


def test_a_process_a_worker_starts_carries_the_marker_and_dies_with_the_world():
    library = Library()
    try:
        command = f"sleep 60 >/dev/null 2>&1 & echo $! ; printenv {WORLD_MARKER}"
        child, marker = library.run("subprocess:getoutput", (command,)).output.split()
        assert Path(marker).name.startswith("grader-world1-")
    finally:
        library.close()
    assert _state(child) in ("gone", "Z"), "a process started by a worker outlived its world"


def _state(pid: int | str) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return "gone"


@pytest.mark.skipif(not signals_scoped(), reason="the kernel's Landlock cannot scope signals")
def test_a_sandboxed_worker_cannot_signal_the_zygote_though_a_trusted_one_can(probe):
    """Landlock (ABI 6+) is what keeps a submission's worker away from the zygote: the same call
    from a trusted worker (no hidden folders, no Landlock) reaches it."""
    assert probe.function("parent")() == _zygote_pid()
    with pytest.raises(SubmissionError, match="PermissionError"):
        probe.function("signal_parent")(signal.SIGSTOP)
    library = Library()
    try:
        assert library.run("os:getppid").output == _zygote_pid()
        library.run("os:kill", (_zygote_pid(), 0))  # signal 0: the right to signal, checked only
    finally:
        library.close()
    state = _state(_zygote_pid())
    assert state in ("S", "R"), f"the zygote is in state {state} after a worker tried to stop it"


def test_what_a_worker_changes_in_memory_stays_in_its_world(probe):
    probe.function("poison_torch")()
    assert probe.function("torch_is_poisoned")(), "the same worker keeps its own changes"
    probe.restart()
    assert not probe.function("torch_is_poisoned")(), "a new world must fork from the untouched zygote"


def test_a_dead_zygote_is_reaped_at_once_and_replaced_for_the_next_world(probe):
    """A zygote killed from outside (ipykernel kills its kernel's children at shutdown, then waits
    for them to be gone) is reaped at once, never left a zombie; the next world gets a new one."""
    first = probe.function("parent")()
    os.kill(first, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while _state(first) != "gone" and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _state(first) == "gone", (
        f"the killed zygote is still there in state {_state(first)} (Z: a zombie nobody reaped; "
        "the reaper thread of Zygote in grader/sandbox/zygote.py)"
    )
    probe.restart()
    second = probe.function("parent")()
    assert second != first and second == _zygote_pid()


def test_a_world_without_a_process_group_is_kept_after_an_exception(probe):
    before = probe.function("pid")()
    with pytest.raises(SubmissionError, match="ValueError: wrong"):
        probe.function("fails")("wrong")
    assert probe.function("pid")() == before


def test_a_stub_is_answered_from_its_source_once_its_file_has_imported(probe, monkeypatch):
    calls = []
    real_call = World.call
    monkeypatch.setattr(World, "call", lambda self, *a, **k: calls.append(a[-1]) or real_call(self, *a, **k))
    with pytest.raises(SubmissionError) as first:
        probe.function("unwritten")(1)  # the file has not been imported yet: a worker answers
    assert calls == ["unwritten"]
    with pytest.raises(SubmissionError) as again:
        probe.function("unwritten")(2)
    with pytest.raises(SubmissionError) as built:
        probe.function("Unbuilt")()
    assert calls == ["unwritten"], "a known stub must not reach a worker"
    assert again.value.kind == first.value.kind == "not_implemented"
    assert again.value.message == first.value.message
    assert again.value.message.startswith("unwritten is not implemented yet: implement it in ")
    assert built.value.message.startswith("Unbuilt.__init__ is not implemented yet")


def test_still_the_stub_reads_the_source_and_runs_nothing(probe, monkeypatch):
    """Submission.still_the_stub, which suites ask before preparing costly inputs: from the
    source alone, before any worker has imported the file."""
    calls = []
    monkeypatch.setattr(World, "call", lambda self, *a, **k: calls.append(a[-1]))
    assert probe.still_the_stub("unwritten") and probe.still_the_stub("Unbuilt")
    assert not probe.still_the_stub("pid"), "a written function is not the stub"
    assert calls == [], "still_the_stub must not run the submission"


@pytest.mark.parametrize(
    ("source", "stub"),
    [
        ("def f():\n    raise NotImplementedError('implement f')\n", "implement f"),
        ("def f():\n    '''Doc.'''\n    raise NotImplementedError('implement f')\n", "implement f"),
        ("class f:\n    def __init__(self):\n        raise NotImplementedError('x')\n", "x"),
        ("def f():\n    raise NotImplementedError('a')\n\n\ndef f():\n    return 1\n", None),
        ("def f():\n    raise NotImplementedError('a')\n\n\nf = lambda: 1\n", None),
        ("def f():\n    raise NotImplementedError('a')\n\n\nglobals()['f'] = print\n", None),
        ("import functools\n\n@functools.cache\ndef f():\n    raise NotImplementedError('a')\n", None),
        ("def f():\n    raise ValueError('a')\n", None),
        ("def f():\n    print(1)\n    raise NotImplementedError('a')\n", None),
        ("class f(Base, metaclass=Meta):\n    def __init__(self):\n        raise NotImplementedError('x')\n", None),
        ("class f:\n    pass\n\n\nf.__init__ = lambda self: None\n", None),
        ("def f(:\n", None),
    ],
    ids=[
        "stub",
        "stub-with-docstring",
        "class-with-stub-init",
        "redefined",
        "reassigned",
        "dynamic-rebinding",
        "decorated",
        "other-exception",
        "more-than-the-raise",
        "metaclass",
        "init-assigned-later",
        "syntax-error",
    ],
)
def test_only_a_function_certain_to_raise_not_implemented_counts_as_a_stub(tmp_path, source, stub):
    (tmp_path / "m.py").write_text(source)
    assert stub_message(tmp_path / "m.py", "f", frozenset()) == stub


def test_a_given_definition_is_never_taken_for_the_students_stub(tmp_path):
    (tmp_path / "m.py").write_text("def f():\n    raise NotImplementedError('a')\n")
    assert stub_message(tmp_path / "m.py", "f", frozenset({"f"})) is None


def _timings(*pairs: tuple[float, float]):
    values = iter(pairs)
    return lambda: Timing(*next(values))


def test_a_ratio_measured_while_the_processes_waited_for_a_cpu_gives_no_verdict():
    quiet = interleaved_ratio(_timings((2.0, 0.0), (2.0, 0.01)), _timings((1.0, 0.0), (1.0, 0.05)), rounds=1)
    assert quiet.reliable and quiet.ratio == 2.0
    require_reliable(quiet)
    # The share is over all rounds, weighted by time: (2 s x 0.3 + 1 s x 0.6) / 3 s
    busy = interleaved_ratio(_timings((9.0, 0.0), (2.0, 0.3)), _timings((9.0, 0.0), (1.0, 0.6)), rounds=1)
    assert busy.contention == pytest.approx(0.4) and not busy.reliable
    with pytest.raises(NotMeasuredReliably, match=r"not measured reliably: the machine was busy \(other processes"):
        require_reliable(busy)
    with pytest.raises(NotMeasuredReliably, match=r"no points either way for now: a rerun .* gives them back"):
        require_reliable(busy)


def test_no_rounds_are_timed_when_the_warm_up_finds_the_machine_saturated():
    calls = []

    def timed(contention: float):
        return lambda: calls.append(contention) or Timing(1.0, contention)

    saturated = interleaved_ratio(timed(0.9), timed(0.8), rounds=5)
    assert calls == [0.9, 0.8] and saturated.contention == pytest.approx(0.85) and not saturated.reliable
    calls.clear()
    interleaved_ratio(timed(0.5), timed(0.5), rounds=5)
    assert len(calls) == 12, "a machine busy but not saturated is measured in full"


def test_best_ratio_measures_once_more_when_the_machine_was_a_little_busy_and_keeps_a_reliable_one():
    busy, calm = Ratio(1.0, 1.0, 1.0, contention=0.4), Ratio(3.5, 3.5, 1.0, contention=0.01)
    measured = iter([busy, calm])
    assert best_ratio(lambda: next(measured), limit=4.0) == calm
    still_busy = Ratio(1.0, 1.0, 1.0, contention=0.3)
    measured = iter([busy, still_busy, calm])
    kept = best_ratio(lambda: next(measured), limit=4.0)
    assert kept == still_busy, "after one more busy try, the least contended measurement is kept"
    assert next(measured) == calm, "a busy machine is measured twice, not three times"
    saturated = Ratio(1.0, 1.0, 1.0, contention=0.9)
    measured = iter([saturated, calm])
    assert best_ratio(lambda: next(measured), limit=4.0) == saturated, "a saturated machine is not retried"
    assert CONTENTION_LIMIT < 0.3 and 0.4 < 2 * CONTENTION_LIMIT < 0.9


def test_an_unmeasured_check_is_worth_nothing_is_still_counted_and_says_rerun():
    module = ModuleResult("moe", "MoE", 10.0)
    module.tests = [
        TestResult("moe", "test_correct", "hidden", PASSED),
        TestResult("moe", "test_time", "hidden", UNMEASURED, message="not measured reliably: ... Rerun"),
        TestResult("moe", "test_wrong", "hidden", FAILED, message="wrong"),
    ]
    module.assign_points()
    assert [t.max_score for t in module.tests] == pytest.approx([10 / 3] * 3, abs=1 / 1024)
    assert module.score == module.tests[0].max_score and module.max_score == 10.0
    report = GradeReport("course", "sub", "cpu", [module])
    text = render(report, "text")
    assert "rerun: 1 timed check(s) not measured" in text and "? test_time" in text
    assert 'errors="1"' in render(report, "junit") and 'failures="1"' in render(report, "junit")


TIMED_PROBE = """
from pathlib import Path

from grader.perf import NotMeasuredReliably

RUNS = Path(__file__).with_name("runs")


def test_time_busy_at_first():
    runs = int(RUNS.read_text()) if RUNS.exists() else 0
    RUNS.write_text(str(runs + 1))
    if runs == 0:
        raise NotMeasuredReliably("not measured reliably: the machine was busy")


def test_time_always_busy():
    raise NotMeasuredReliably("not measured reliably: the machine was busy; a rerun gives them back.")


def test_time_passes():
    pass
"""


def test_timed_checks_left_unmeasured_are_timed_again_at_the_end_and_say_a_rerun_gives_the_points(tmp_path):
    """runner._measure_again: only the unmeasured checks run again, once; one measured then gets
    its verdict, one still busy stays unmeasured (no points) and its message says a rerun gives
    the points back, above its replay line."""
    from grader.runner import _Collector, _measure_again

    folder = tmp_path / "probe"
    folder.mkdir()
    (folder / "test_probe.py").write_text(TIMED_PROBE)
    course = type("Course", (), {"root": tmp_path})()
    options = ["-p", "no:terminal", "-p", "no:cacheprovider", "--rootdir", str(tmp_path), "-o", "addopts="]
    collector = _Collector(course, None)
    pytest.main([str(folder / "test_probe.py"), *options], plugins=[collector])
    statuses = {n.split("::")[1]: r.status for n, r in collector.results.items()}
    busy = {"test_time_busy_at_first": UNMEASURED, "test_time_always_busy": UNMEASURED}
    assert statuses == {**busy, "test_time_passes": PASSED}
    _measure_again(course, collector, options)
    results = {n.split("::")[1]: r for n, r in collector.results.items()}
    assert results["test_time_busy_at_first"].status == PASSED, "measured again, it gets its verdict"
    assert (folder / "runs").read_text() == "2", "the busy check ran twice, no more"
    still = results["test_time_always_busy"]
    assert still.status == UNMEASURED
    said, _, replay = still.message.partition("\nreplay:")
    assert said.endswith("timed again at the end of the grading, and the machine was still too busy."), said
    assert replay, f"the replay line is gone or moved: {still.message!r}"


def test_the_text_report_keeps_parametrize_ids_which_look_like_markup():
    module = ModuleResult("collectives", "Collectives", 10.0)
    name = "test_ring_allreduce_matches_all_reduce[world=3-divisible-float32]"
    module.tests = [TestResult("collectives", name, "hidden", FAILED, message="rank [1] differs")]
    module.assign_points()
    text = render(GradeReport("course", "sub", "cpu", [module]), "text")
    assert name in text and "rank [1] differs" in text


def test_a_group_marker_becomes_the_process_group_of_its_ranks_on_those_ranks_only():
    """Group((1, 3)) on ranks 1 and 3 while Group((0, 2)) is on ranks 0 and 2 (a world of 4): two
    groups of 2, each built by its members only; a rank handed a group it is not in is refused."""
    library = Library()
    try:
        groups = [Group((0, 2)), Group((1, 3)), Group((0, 2)), Group((1, 3))]
        members = library.spmd("torch.distributed:get_process_group_ranks", 4, [(g,) for g in groups])
        assert members.outputs == [[0, 2], [1, 3], [0, 2], [1, 3]]
        sizes = library.spmd("torch.distributed:get_world_size", 4, [(g,) for g in groups])
        assert sizes.outputs == [2, 2, 2, 2], "the same marker again reuses the groups built"
        with pytest.raises(SubmissionError, match="not a member"):
            library.spmd("torch.distributed:get_world_size", 4, [(Group((1, 3)),)] * 4)
    finally:
        library.close()
