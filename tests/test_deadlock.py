"""Deadlocks are found in about a second, from outside the ranks (grader/sandbox/deadlock.py),
and cost only the call that deadlocked; a rank that computes or sleeps is never taken for one."""

from __future__ import annotations

import time

import pytest
import torch

from grader.course import Function, Module
from grader.sandbox import Submission, SubmissionError
from grader.sandbox.deadlock import find_cycle, in_communication, waits_for

PROBE = """
import time

import torch
import torch.distributed as dist


def ready():
    return dist.get_rank()


def receive_first(x):
    rank, p = dist.get_rank(), dist.get_world_size()
    dist.recv(x, (rank - 1) % p)
    dist.send(x, (rank + 1) % p)
    return x


def exchange(x, wait_on_the_wrong_request):
    rank, p = dist.get_rank(), dist.get_world_size()
    out = torch.empty_like(x)
    receive = dist.irecv(out, (rank - 1) % p, tag=1 if wait_on_the_wrong_request else 0)
    send = dist.isend(x, (rank + 1) % p, tag=0)
    receive.wait()
    send.wait()
    return out


def sleep_then_send(x, seconds):
    if dist.get_rank() == 0:
        time.sleep(seconds)
        dist.send(x, 1)
    else:
        dist.recv(x, 0)
    return x


def compute_forever_while_the_other_waits(x):
    if dist.get_rank() == 0:
        while True:
            x = x + 1
    dist.recv(x, 0)
    return x


def return_early_on_rank_1(x):
    if dist.get_rank() == 1:
        return x
    dist.all_reduce(x)
    return x


def batch_receives_from_the_wrong_neighbour(x):
    rank, p = dist.get_rank(), dist.get_world_size()
    out = torch.empty_like(x)
    ops = [dist.P2POp(dist.isend, x, (rank + 1) % p), dist.P2POp(dist.irecv, out, (rank + 1) % p)]
    for request in dist.batch_isend_irecv(ops):
        request.wait()
    return out


def isend_irecv_to_the_wrong_neighbour(x):
    rank, p = dist.get_rank(), dist.get_world_size()
    out = torch.empty_like(x)
    send = dist.isend(x, (rank + 1) % p)
    receive = dist.irecv(out, (rank + 1) % p)
    send.wait()
    receive.wait()
    return out


def async_all_reduce_skipped_by_rank_1(x):
    if dist.get_rank() != 1:
        dist.all_reduce(x, async_op=True).wait()
    return x


def broadcast_on_rank_0_all_reduce_elsewhere(x):
    if dist.get_rank() == 0:
        dist.broadcast(x, 0)
    else:
        dist.all_reduce(x)
    return x


def async_all_gather_on_rank_0_all_reduce_elsewhere(x):
    if dist.get_rank() == 0:
        request = dist.all_gather_into_tensor(torch.empty(x.numel() * dist.get_world_size()), x, async_op=True)
    else:
        request = dist.all_reduce(x, async_op=True)
    request.wait()
    return x
"""
NON_BLOCKING = (
    "batch_receives_from_the_wrong_neighbour", "isend_irecv_to_the_wrong_neighbour",
    "async_all_reduce_skipped_by_rank_1", "broadcast_on_rank_0_all_reduce_elsewhere",
    "async_all_gather_on_rank_0_all_reduce_elsewhere",
)  # fmt: skip
NAMES = ("ready", "receive_first", "exchange", "sleep_then_send", "compute_forever_while_the_other_waits")
NAMES += ("return_early_on_rank_1", *NON_BLOCKING)
TIME_LIMIT_S = 20.0
CALL_LIMIT_S = 10.0  # a deadlock is found in about a second (STILL_S), far inside this limit


@pytest.fixture(scope="module")
def probe(tmp_path_factory) -> Submission:
    folder = tmp_path_factory.mktemp("submission") / "probe"
    folder.mkdir()
    (folder / "probe.py").write_text(PROBE)
    functions = {n: Function(n, "probe.py", "1. Probe") for n in NAMES}
    module = Module("probe", "Probe", "lectures/probe.md", 1, ("probe.py",), functions, TIME_LIMIT_S, 1024)
    submission = Submission(module, folder)
    yield submission
    submission.close()


def timed(call) -> tuple[float, SubmissionError | None]:
    start = time.monotonic()
    try:
        call()
    except SubmissionError as error:
        return time.monotonic() - start, error
    return time.monotonic() - start, None


def test_a_ring_that_receives_first_is_reported_as_a_deadlock_long_before_its_time_limit_with_each_rank_and_the_cycle(
    probe,
):
    """The call gets a 10 s limit; it must end as a deadlock (found after STILL_S of stillness,
    about a second), not as a timeout. No absolute time is asserted: a loaded machine only
    delays the stack dumps, and the kind of the error is what proves the limit was not reached."""
    probe.function("ready").spmd(3, [()] * 3)  # the world is up: what is limited is the call
    call = probe.function("receive_first")
    seconds, error = timed(lambda: call.spmd(3, [(torch.zeros(4),)] * 3, time_limit_s=CALL_LIMIT_S))
    assert error is not None and error.kind == "deadlock", (
        f"expected a deadlock found before the {CALL_LIMIT_S:.0f} s limit, got {error} after {seconds:.1f} s"
    )
    message = error.message
    assert "every rank waited in a communication call" in message, message
    for rank, left in ((0, 2), (1, 0), (2, 1)):
        assert f"rank {rank}: probe.py:" in message and f"waits in recv from rank {left} (tag 0)" in message, message
    assert "the cycle: rank 0 waits for rank 2, rank 2 waits for rank 1, rank 1 waits for rank 0" in message, message
    assert "the case: world size 3, receive_first(float32[4])" in message, message


def test_waiting_on_a_request_that_never_completes_names_the_request(probe):
    _, error = timed(lambda: probe.function("exchange").spmd(2, [(torch.ones(3), True)] * 2))
    assert error is not None and error.kind == "deadlock", f"expected a deadlock, got {error}"
    assert "in exchange(): receive.wait()" in error.message, error.message
    assert "waits in wait() on irecv from rank 1 (tag 1)" in error.message, error.message


# What each rank of a world of 4 is seen waiting in: its line of the probe, and its request.
WAITS = {
    "batch_receives_from_the_wrong_neighbour": ("request.wait()", "waits in wait() on isend to rank {next}"),
    "isend_irecv_to_the_wrong_neighbour": ("send.wait()", "waits in wait() on isend to rank {next}"),
    "async_all_reduce_skipped_by_rank_1": ("dist.all_reduce(x, async_op=True).wait()", "waits in wait() on all_reduce"),
    "broadcast_on_rank_0_all_reduce_elsewhere": ("dist.", "waits in "),
    "async_all_gather_on_rank_0_all_reduce_elsewhere": ("request.wait()", "waits in wait() on all_"),
}


@pytest.mark.parametrize("measure", [(), ("p2p", "groups")], ids=["plain", "under_the_graders_probes"])
@pytest.mark.parametrize("name", NON_BLOCKING)
def test_every_non_blocking_and_mismatched_deadlock_is_reported_as_one_naming_each_ranks_wait(probe, name, measure):
    """isend/irecv, batch_isend_irecv and async collectives then wait(), and two ranks in
    different collectives: each is found by its stillness, also when the wait goes through the
    grader's own probes (the counters the performance checks use wrap Work.wait), never left to
    the time limit. Each waiting rank is named with its own line and what it waits for."""
    probe.function("ready").spmd(4, [()] * 4)
    call = probe.function(name)
    seconds, error = timed(lambda: call.spmd(4, [(torch.ones(5),)] * 4, measure=measure, time_limit_s=CALL_LIMIT_S))
    assert error is not None and error.kind == "deadlock", (
        f"expected a deadlock found before the {CALL_LIMIT_S:.0f} s limit, got {error} after {seconds:.1f} s"
    )
    line, waits = WAITS[name]
    for rank in (0, 2, 3):
        shown = f"rank {rank}: probe.py:"
        assert shown in error.message and f"in {name}(): {line}" in error.message, error.message
        assert waits.format(next=(rank + 1) % 4) in error.message, error.message
    assert "waiting in wait() of probes.py" not in error.message, "the grader's wrappers are not the student's wait"


def test_only_the_very_same_call_is_not_run_again_after_a_deadlock(probe):
    x = torch.arange(3.0)
    with pytest.raises(SubmissionError) as first:
        probe.function("exchange").spmd(2, [(x, True)] * 2)
    assert first.value.kind == "deadlock"
    same_call = r"not run: the same call \(exchange at world size 2, the same arguments\) deadlocked"
    with pytest.raises(SubmissionError, match=same_call):
        probe.function("exchange").spmd(2, [(x, True)] * 2)
    with pytest.raises(SubmissionError, match=same_call):  # equal values in new tensors: the same call
        probe.function("exchange").spmd(2, [(torch.arange(3.0), True)] * 2)
    with pytest.raises(SubmissionError) as measured:  # under the grader's probes: another run
        probe.function("exchange").spmd(2, [(x, True)] * 2, measure=("p2p",))
    assert measured.value.kind == "deadlock", f"the measured call must run (and deadlock), got {measured.value}"
    result = probe.function("exchange").spmd(2, [(x, False)] * 2)  # another call: a fresh world runs it
    assert torch.equal(result.outputs[0], x), result.outputs


def test_a_rank_that_returned_while_others_wait_is_named(probe):
    _, error = timed(lambda: probe.function("return_early_on_rank_1").spmd(3, [(torch.ones(2),)] * 3))
    assert error is not None and error.kind == "deadlock", f"expected a deadlock, got {error}"
    assert "ranks 0, 2 waited in a communication call" in error.message, error.message
    assert "(rank 1 had already returned)" in error.message, error.message


def test_a_deadlock_on_a_machine_too_busy_for_a_quiet_look_is_still_a_deadlock_at_the_limit(probe, monkeypatch):
    """On a loaded machine some thread of the ranks is always runnable, so the early look waits
    for a quiet moment that may not come before the limit (simulated here: every thread reads
    as running). At the limit the stacks alone decide: ranks that all wait in communication,
    with no byte moving, are reported as the deadlock they are, not as a slow call."""
    monkeypatch.setattr("grader.system.any_thread_running", lambda pid: True)
    probe.function("ready").spmd(3, [()] * 3)
    seconds, error = timed(lambda: probe.function("receive_first").spmd(3, [(torch.ones(4),)] * 3, time_limit_s=3))
    assert error is not None and error.kind == "deadlock", f"expected a deadlock at the 3 s limit, got {error}"
    assert seconds >= 3, f"reported after {seconds:.1f} s: the early look must wait while threads run"
    assert "the cycle: rank 0 waits for rank 2" in error.message, error.message


def test_a_rank_that_sleeps_before_sending_is_not_a_deadlock(probe):
    """Rank 1 waits in recv for 2.5 s, with no byte moving: rank 0 is asleep, not communicating."""
    result = probe.function("sleep_then_send").spmd(2, [(torch.full((2,), 7.0), 2.5), (torch.zeros(2), 2.5)])
    assert torch.equal(result.outputs[1], torch.full((2,), 7.0))


def test_a_rank_that_computes_forever_is_stopped_by_the_time_limit_not_as_a_deadlock(probe):
    seconds, error = timed(
        lambda: probe.function("compute_forever_while_the_other_waits").spmd(2, [(torch.zeros(2),)] * 2, time_limit_s=3)
    )
    assert error is not None and error.kind == "timeout", f"expected a timeout, got {error}"
    assert seconds >= 3, f"stopped after {seconds:.1f} s, before its 3 s limit"
    assert "did not finish within 3 s" in error.message, error.message


DUMP = """Thread 0x00007f (most recent call first):
  File "{file}", line {line} in {function}
  File "/work/submission/ring.py", line 4 in ring
"""


@pytest.mark.parametrize(
    ("file", "function", "blocked"),
    [
        ("/venv/site-packages/torch/distributed/distributed_c10d.py", "recv", True),
        ("/venv/site-packages/torch/nn/modules/linear.py", "forward", False),
        ("/usr/lib/python3.11/time.py", "sleep", False),
    ],
)
def test_a_stack_is_in_communication_only_when_its_innermost_frame_is_in_torch_distributed(file, function, blocked):
    assert in_communication(DUMP.format(file=file, line=10, function=function), None) is blocked


def test_receives_come_before_sends_when_following_who_waits_for_whom():
    assert waits_for("waits on its requests: isend to rank 1 (tag 0), irecv from rank 3 (tag 0)") == [3, 1]
    assert waits_for("waits in all_reduce in a group of 4") == []
    assert find_cycle({0: [1], 1: [2], 2: [0]}) == [0, 1, 2]
    assert find_cycle({0: [1], 1: [], 2: [0]}) is None
    assert find_cycle({0: [2], 2: [2]}) == [2]
