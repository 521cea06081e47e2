"""Module reliability's given code that no suite grades: the fork server its recorders share
(grader/models/fork_server.py), on jobs of a few lines that import nothing heavy, and the
recorders' refusals (grader/models/flight_recorder.py, grader/models/step_trace.py)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from grader.models.flight_recorder import record_dumps
from grader.models.fork_server import ForkServer
from grader.models.step_trace import record_step_traces

TARGETS = '''
import time


def finish(rank, world_size, folder):
    with open(f"{folder}/rank{rank}", "w") as file:
        file.write(str(world_size))


def fail(rank, world_size):
    raise RuntimeError(f"rank {rank} fails on purpose")


def hang(rank, world_size):
    time.sleep(600)
'''


@pytest.fixture
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ForkServer]:
    """A server of this test's own that can import the jobs above (module fork_targets)."""
    (tmp_path / "fork_targets.py").write_text(TARGETS)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    server = ForkServer()
    yield server
    server.process.kill()


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_a_job_runs_each_rank_once_and_reports_their_exit_statuses(server, tmp_path):
    with server.job("fork_targets:finish", 3, tmp_path) as pids:
        assert server.wait(pids, 60) == [0, 0, 0]
    assert len(set(pids)) == 3
    assert {path.name: path.read_text() for path in tmp_path.glob("rank*")} == {f"rank{r}": "3" for r in range(3)}


def test_a_rank_that_raises_exits_1_with_its_traceback_in_the_log(server):
    with server.job("fork_targets:fail", 2) as pids:
        assert server.wait(pids, 60) == [1, 1]
    assert "RuntimeError: rank 1 fails on purpose" in server.tail()


def test_a_job_past_its_timeout_is_killed_on_leaving_and_the_next_job_runs(server, tmp_path):
    with server.job("fork_targets:hang", 2) as pids:
        assert server.wait(pids, 0.5) is None, "the ranks sleep for 600 s: wait must give up at its timeout"
    assert all(map(_gone, pids)), "leaving the job must kill its ranks, and the server reap them"
    with server.job("fork_targets:finish", 1, tmp_path) as pids:
        assert server.wait(pids, 60) == [0]


def test_leaving_a_job_without_waiting_kills_its_ranks(server, tmp_path):
    """The flight recorder's jobs end in a hang: the caller takes the dumps and leaves."""
    with server.job("fork_targets:hang", 2) as pids:
        pass
    assert all(map(_gone, pids))
    with server.job("fork_targets:finish", 1, tmp_path) as pids:
        assert server.wait(pids, 60) == [0]


def test_an_argument_that_is_not_one_word_is_refused(server, tmp_path):
    with pytest.raises(ValueError, match="single words"), server.job("fork_targets:finish", 1, "a folder"):
        pass
    with server.job("fork_targets:finish", 1, tmp_path) as pids:  # nothing was sent: the server is in step
        assert server.wait(pids, 60) == [0]


REFUSED = [("no_such_job", 4), ("healthy", 3), ("healthy", 10), ("healthy", True)]


@pytest.mark.parametrize(("job", "world_size"), REFUSED)
def test_record_dumps_refuses_an_unknown_job_or_world_size(job, world_size):
    with pytest.raises(ValueError):
        record_dumps(job, world_size)


@pytest.mark.parametrize("world_size", [1, 5, True, 2.0])
def test_record_step_traces_refuses_a_world_size_outside_2_to_4(world_size):
    with pytest.raises(ValueError, match="world_size must be 2, 3 or 4"):
        record_step_traces(world_size)
