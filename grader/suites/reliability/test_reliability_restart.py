"""Hidden suite: train_with_restarts under a real torchrun (the library: torch.distributed.run,
its elastic agent and c10d rendezvous on localhost, --standalone --max-restarts=2) whose rank-1 worker is
killed with SIGKILL once the checkpoint of step 4 exists. torchrun must have restarted both
workers (new pids, restart count 1), and the final parameters must equal, bit for bit in
float64, those of an uninterrupted run computed in the grader's process from the course's own
model, optimizer and data. A file that is not a complete checkpoint is planted in the folder
first. One run per grading: it takes about 15 s."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from grader.sandbox import SubmissionError
from grader.sandbox import scratch as worker_folders
from grader.suites.reliability.restart_reference import states
from grader.testing import expect_exception

STEPS, EVERY, KILL_AFTER = 12, 2, 4
PARTIAL = "step_000099.pt.partial"  # planted before the run: not a checkpoint
_RUNS: dict[int, dict] = {}


@pytest.fixture(scope="module")
def scratch() -> Iterator[Path]:
    """This file's folder, which the workers can read, removed after its tests (grader/sandbox/scratch.py)."""
    with worker_folders.folder("restart-") as path:
        yield path


def restarted_run(submission, scratch: Path) -> dict:
    """The one run of this grading (every test here reads it)."""
    if id(submission) not in _RUNS:
        try:  # a stub says so here, in a worker, not from inside torchrun's processes
            submission.function("train_with_restarts")(str(scratch), 0, EVERY)
        except SubmissionError as error:
            if error.kind == "not_implemented":
                raise
        folder = scratch / f"run{len(_RUNS)}"
        folder.mkdir()
        (folder / PARTIAL).write_bytes(b"a save that died halfway")  # must be ignored
        run = submission.function("run_under_torchrun")(str(folder), STEPS, EVERY, KILL_AFTER)
        _RUNS[id(submission)] = {**run, "folder": folder}
    return _RUNS[id(submission)]


def _same(got: dict, want: dict) -> list[str]:
    return [name for name in want if not (name in got and torch.equal(got[name], want[name]))]


@pytest.mark.points(8)
def test_a_killed_worker_is_restarted_and_the_run_ends_as_if_never_interrupted(submission, scratch):
    run = restarted_run(submission, scratch)
    assert run["returncode"] == 0, f"torchrun exited with {run['returncode']}; its log ends:\n{run['log']}"
    assert run["killed_pid"] is not None, (
        f"rank 1 was never killed: the checkpoint of step {KILL_AFTER} (step_{KILL_AFTER:06d}.pt) never appeared "
        f"while the job ran. Log:\n{run['log']}"
    )
    first = {rank: pid for restart, rank, pid in run["workers"] if restart == 0}
    again = {rank: pid for restart, rank, pid in run["workers"] if restart == 1}
    assert sorted(again) == [0, 1] and not set(again.values()) & set(first.values()), (
        f"expected torchrun to start both workers again (restart count 1, new pids) after the kill; "
        f"workers seen (restart, rank, pid): {run['workers']}"
    )
    want = states(STEPS)
    saved = torch.load(run["folder"] / f"step_{KILL_AFTER:06d}.pt", weights_only=True)["model"]
    assert not _same(saved, want[KILL_AFTER - 1]), (
        f"the checkpoint of step {KILL_AFTER}, written before the kill, already differs from the uninterrupted run "
        f"in {_same(saved, want[KILL_AFTER - 1])}: the training step itself is wrong (gradients averaged over the "
        "world, SGD with momentum: train_with_restarts' docstring)"
    )
    assert run["final"] is not None and not _same(run["final"], want[-1]), (
        f"after the restart the final parameters differ from the uninterrupted run's in "
        f"{_same(run['final'] or {}, want[-1])} (the checkpoint of step {KILL_AFTER} was right): resume the model, "
        "the optimizer's state and the data position from the last complete checkpoint"
    )


@pytest.mark.points(3)
def test_every_checkpoint_is_whole_and_holds_the_model_the_optimizer_and_the_position(submission, scratch):
    run = restarted_run(submission, scratch)
    folder, want = run["folder"], states(STEPS)
    names = sorted(path.name for path in folder.iterdir() if path.is_file() and path.name != PARTIAL)
    expected = [f"step_{step:06d}.pt" for step in range(EVERY, STEPS + 1, EVERY)]
    assert names == expected, f"expected exactly the checkpoints {expected} (no partial file), found {names}"
    for name in expected:
        state = torch.load(folder / name, weights_only=True)
        step = int(name[5:11])
        assert set(state) >= {"model", "optimizer", "next_step"} and state["next_step"] == step, (
            f"{name}: expected the keys model, optimizer and next_step = {step}, got {sorted(state)}"
        )
        assert not _same(state["model"], want[step - 1]), f"{name}: the model differs from the run's after step {step}"
        assert state["optimizer"]["state"], f"{name}: the optimizer's state (momentum buffers) is empty"


@pytest.mark.points(2)
def test_a_world_of_one_already_joined_checkpoints_after_every_step(submission, scratch):
    """train_with_restarts(dir, 3, 1) on a world of one rank whose process group is already
    joined (no torchrun): it trains as the uninterrupted run of one rank does and writes a
    checkpoint after each of the 3 steps (every = 1 is a valid interval)."""
    folder = scratch / "every-step"
    folder.mkdir()
    final = submission.function("train_with_restarts").spmd(1, [(str(folder), 3, 1)]).outputs[0]
    names = sorted(path.name for path in folder.iterdir())
    assert names == [f"step_{step:06d}.pt" for step in (1, 2, 3)], (
        f"every = 1: expected the checkpoints of steps 1, 2 and 3, found {names}"
    )
    want = states(3, world_size=1)[-1]
    assert isinstance(final, dict) and not _same(final, want), (
        f"on one rank after 3 steps the parameters differ from the uninterrupted run's in "
        f"{_same(final if isinstance(final, dict) else {}, want)} (train_with_restarts' docstring: the step)"
    )


@pytest.mark.points(1)
def test_a_world_of_one_checkpoints_after_every_third_step_of_seven(submission, scratch):
    """train_with_restarts(dir, 7, 3) on a world of one rank already joined: checkpoints after
    steps 3 and 6 (an interval that does not divide the run, and is not 2, where counting steps
    from 0 or from 1 gives the same checkpoints), and the run's 7 steps."""
    folder = scratch / "every-third"
    folder.mkdir()
    final = submission.function("train_with_restarts").spmd(1, [(str(folder), 7, 3)]).outputs[0]
    names = sorted(path.name for path in folder.iterdir())
    assert names == ["step_000003.pt", "step_000006.pt"], (
        f"7 steps, every = 3: expected the checkpoints after steps 3 and 6, found {names}"
    )
    want = states(7, world_size=1)[-1]
    assert isinstance(final, dict) and not _same(final, want), (
        f"after 7 steps on one rank the parameters differ from the uninterrupted run's in "
        f"{_same(final if isinstance(final, dict) else {}, want)}"
    )


@pytest.mark.points(1)
def test_a_run_of_one_step_is_valid_and_checkpoints_it(submission, scratch):
    """train_with_restarts(dir, 1, 1) on a world of one rank already joined: steps = 1 is the
    least valid run (ValueError is for steps < 1), one step and its checkpoint."""
    folder = scratch / "one-step"
    folder.mkdir()
    final = submission.function("train_with_restarts").spmd(1, [(str(folder), 1, 1)]).outputs[0]
    names = sorted(path.name for path in folder.iterdir())
    assert names == ["step_000001.pt"], f"steps = 1, every = 1: expected the checkpoint of step 1, found {names}"
    want = states(1, world_size=1)[-1]
    assert isinstance(final, dict) and not _same(final, want), (
        f"after one step on one rank the parameters differ from the uninterrupted run's in "
        f"{_same(final if isinstance(final, dict) else {}, want)}"
    )


@pytest.mark.points(1)
@pytest.mark.parametrize(("steps", "every"), [(0, 2), (5, 0)])
def test_a_run_of_no_step_or_no_checkpoint_interval_raises_value_error(submission, scratch, steps, every):
    """On a world of one rank already joined, so that no other error (torch.distributed's own
    ValueError for a missing RANK, outside torchrun) can stand in for the check."""
    call = submission.function("train_with_restarts")
    expect_exception("ValueError", lambda: call.spmd(1, [(str(scratch), steps, every)]))
