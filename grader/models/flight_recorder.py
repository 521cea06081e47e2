"""Given code of module reliability (read it): real flight-recorder dumps of small gloo jobs, some
healthy, some that would hang. Trusted: the grader records its inputs with the same code.

    from grader.models.flight_recorder import record_dumps, save_dumps, load_dumps
    dumps = record_dumps("size_mismatch")        # one dict per rank, rank 0 first
    dumps[3]["entries"][-1]["input_sizes"]       # [[1536]]: the odd one out
    save_dumps(dumps, "traces")                  # traces/rank_0 .. traces/rank_3
    # python -m torch.distributed.flight_recorder.fr_trace traces --prefix rank_

What a dump is. torch's flight recorder keeps, in every process, a ring buffer of the last
TORCH_FR_BUFFER_SIZE collectives that process issued (set before the process group is created;
0, the default, records nothing). `torch._C._distributed_c10d._dump_fr_trace()` returns it as a
pickle; unpickled it is a dict:

    {"version": "2.10", "pg_config": {...}, "pg_status": {...}, "comm_lib_version": "",
     "entries": [entry, ...],                     # oldest first
     "rank": 3}                                   # added here, see below

and each entry one collective as this rank issued it:

    {"record_id": 5,                    # position in this rank's buffer (all groups together)
     "process_group": ("0", "default_pg"),  # (group name, group description)
     "collective_seq_id": 4,            # 1, 2, 3, ... per group: the n-th collective on it
     "p2p_seq_id": 0, "is_p2p": False,  # send/recv are counted apart (none in these jobs)
     "op_id": 5,
     "profiling_name": "gloo:all_reduce",   # backend:operation
     "input_sizes": [[1024]], "output_sizes": [[1024]],       # one shape per tensor
     "input_dtypes": ["Float"], "output_dtypes": ["Float"],   # c10 names: Float, Double, ...
     "state": "scheduled", "retired": True, "timeout_ms": 60000,
     "time_created_ns": ..., "time_discovered_started_ns": None, "time_discovered_completed_ns": None,
     "thread_id": "...", "thread_name": "python",
     "frames": [{"name": "all_reduce", "filename": ".../distributed_c10d.py", "line": 3245}, ...]}

With gloo, every entry's state stays "scheduled" (gloo reports no start or completion to the
recorder; ProcessGroupNCCL does), so which ranks entered a collective is told by which buffers
hold it, not by its state.

Two things are added to what torch writes, both in the form torch's analyzer expects:
- "rank": the global rank of the process that wrote the dump. torch does not write it in the
  dump; its analyzer takes it from the file's name (rank_3), and so does load_dumps.
- "pg_config": gloo writes a placeholder ({"": {"name": "", "desc": "", "ranks": "[]"}});
  ProcessGroupNCCL writes one row per group the rank belongs to, and the analyzer needs it to
  know who should have entered each collective. record_dumps fills it in as ProcessGroupNCCL
  does: {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2, 3]"}, "1": {...}}, with
  "ranks" a string of the group's global ranks, from the groups this rank really created.
Nothing else is changed. A dump is plain data (dict, list, tuple, str, int, bool, None).

The jobs. Every job runs on `world_size` ranks (an even number, 2 to 8) with gloo on this
machine's CPUs. Each job first creates the pair groups {0, 1}, {2, 3}, ... (names "1", "2", ...,
descriptions "pair_0_1", "pair_2_3", ...), then runs the same healthy start on every rank,
waiting for each collective:

    world ("0", "default_pg"): seq 1 all_reduce float32 [1024]
                               seq 2 all_reduce float32 [64, 8]
                               seq 3 broadcast  float32 [256] from rank 0
    each pair:                 seq 1 all_reduce float32 [32]

and then (L = world_size - 1, the last rank):

    "healthy"            world seq 4 all_reduce float32 [1024] (the 3rd all_reduce);
                         each pair seq 2 all_reduce float32 [32]; world seq 5 all_reduce
                         float32 [1]. Everything matches.
    "skip_all_reduce"    world seq 4: every rank but L all_reduces [1024]; L skips it.
    "broadcast_instead"  world seq 4: L broadcasts [1024] from rank 0; the others all_reduce it.
    "size_mismatch"      world seq 4: L all_reduces 1536 elements; the others 1024.
    "dtype_mismatch"     world seq 4: L all_reduces float64 [1024]; the others float32.
    "subgroup_skip"      pair {0, 1} seq 2: rank 0 all_reduces [32], rank 1 skips it (every
                         other pair runs it); then world seq 4 all_reduce float32 [1024] on every
                         rank, which completes: the world is fine, the pair hangs.

A broken job would hang (or, with gloo, crash on the bad bytes), so it is stopped right after
everyone has issued its last collective: the broken collective is issued asynchronously and never
waited for, each rank dumps its buffer as soon as it has issued it, and when a mismatching
collective could send a rank bytes it does not expect, the ranks issue it one after another,
the odd rank last, each after the previous one's dump is taken. Then every process is killed.
"""

from __future__ import annotations

import ast
import os
import pickle
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed import FileStore

from grader.models.fork_server import ForkServer

JOBS = ("healthy", "skip_all_reduce", "broadcast_instead", "size_mismatch", "dtype_mismatch", "subgroup_skip")

BUFFER_SIZE = 2000  # TORCH_FR_BUFFER_SIZE: far more entries than any job issues, so no buffer wraps
TIMEOUT_S = 30.0  # a job that has not dumped by then is reported broken
SETTLE_S = 1.0  # the longest a rank waits for the recorder to show its completed collectives


def record_dumps(job: str, world_size: int = 4) -> list[dict]:
    """Run `job` (one of JOBS, described in this module's docstring) on `world_size` local gloo
    processes and return the flight-recorder dump of each, rank 0 first. Takes well under a
    second once torch is loaded (the first call starts a process that imports it once and forks
    every job's processes from there: grader/models/fork_server.py).
    Raises ValueError for an unknown job or a world size that is not an even number from 2 to 8,
    RuntimeError if a process dies before it has dumped.
    """
    if job not in JOBS:
        raise ValueError(f"job must be one of {JOBS}, not {job!r}")
    if not isinstance(world_size, int) or isinstance(world_size, bool) or world_size not in (2, 4, 6, 8):
        raise ValueError(f"world_size must be an even number from 2 to 8, not {world_size!r}")
    # The workers rendezvous through a file of their own, a store in a fresh temporary folder
    # (no two jobs can collide), and hand their dumps back through it. A file, not a TCPStore:
    # a TCP client's connect now and then stalled for 5 s on a loaded machine.
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "store")
        store = FileStore(path, -1)
        server = ForkServer.get()
        with server.job(f"{__name__}:_worker", world_size, job, path) as pids:
            try:
                return [_collect(store, rank, pids, server) for rank in range(world_size)]
            finally:
                store.set("release", "1")


def save_dumps(dumps: list[dict], folder: str | os.PathLike, prefix: str = "rank_") -> list[Path]:
    """Write each dump to `folder`/`prefix``rank` (created if need be) as the pickle torch's
    flight recorder writes, the layout torch's analyzer reads:
        python -m torch.distributed.flight_recorder.fr_trace FOLDER --prefix rank_
    A dump without "rank" is taken to be rank i, its place in the list. Returns the paths.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for index, dump in enumerate(dumps):
        path = folder / f"{prefix}{dump.get('rank', index)}"
        path.write_bytes(pickle.dumps(dump))
        paths.append(path)
    return paths


def load_dumps(folder: str | os.PathLike, prefix: str = "rank_") -> list[dict]:
    """The dumps in `folder` named `prefix``rank` (as save_dumps or torch writes them), rank 0
    first, each with "rank" set from its file's name as torch's analyzer does."""
    dumps = []
    for path in Path(folder).iterdir():
        if path.name.startswith(prefix) and path.name[len(prefix) :].isdigit():
            dump = pickle.loads(path.read_bytes())
            dump["rank"] = int(path.name[len(prefix) :])
            dumps.append(dump)
    return sorted(dumps, key=lambda dump: dump["rank"])


def group_ranks(dump: dict, name: str) -> list[int]:
    """The global ranks of the group called `name` (e.g. "0", "1") in a dump's pg_config."""
    return list(ast.literal_eval(dump["pg_config"][name]["ranks"]))


# ----------------------------------------------------------------------------- the parent's side


def _collect(store: FileStore, rank: int, pids: list[int], server: ForkServer) -> dict:
    deadline = time.monotonic() + TIMEOUT_S
    key = f"dump/{rank}"
    while not store.check([key]):
        if server.process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(
                f"flight-recorder job: rank {rank} did not dump its trace within {TIMEOUT_S:.0f} s; "
                f"the workers' stderr:\n{server.tail()}"
            )
        time.sleep(0.002)
    return pickle.loads(store.get(key))


# ----------------------------------------------------------------------------- the workers' side


def _prepare() -> None:
    """Run once in the fork server (grader/models/fork_server.py) before the first job: the
    recorder's first dump symbolizes the Python stacks of its entries, which loads torch's
    symbolizer (seconds); loaded there, every rank inherits it. (It starts no thread, so forking
    stays safe.)"""
    from torch._C._profiler import gather_traceback, symbolize_tracebacks

    symbolize_tracebacks([gather_traceback(python=True, script=False, cpp=False)])


def _worker(rank: int, world_size: int, job: str, path: str) -> None:
    """Rank `rank` of `job`, forked by the fork server."""
    # The recorder reads its size when the process group is created.
    os.environ["TORCH_FR_BUFFER_SIZE"] = str(BUFFER_SIZE)
    store = FileStore(path, -1)
    store.set_timeout(timedelta(seconds=TIMEOUT_S))
    try:
        dist.init_process_group(
            "gloo", store=store, rank=rank, world_size=world_size, timeout=timedelta(seconds=TIMEOUT_S)
        )
        pair = _create_pairs(world_size)
        _healthy_start(pair)
        _JOB_ENDS[job](rank, world_size, pair, store)
        # Stay alive until the parent has every dump: a process that leaves closes its sockets
        # under the others' feet while they may still be dumping.
        store.wait(["release"], timedelta(seconds=TIMEOUT_S))
    finally:
        os._exit(0)  # never wait for gloo's threads, which may be blocked in a hung collective


def _create_pairs(world_size: int) -> Any:
    """Create the pair groups {0, 1}, {2, 3}, ... on every rank (new_group is collective) and
    return the one this rank belongs to."""
    mine = None
    for first in range(0, world_size, 2):
        group = dist.new_group([first, first + 1], group_desc=f"pair_{first}_{first + 1}")
        if dist.get_rank() in (first, first + 1):
            mine = group
    return mine


def _tensor(*shape: int, dtype: str = "float32") -> Any:
    return torch.ones(*shape, dtype=getattr(torch, dtype))


def _healthy_start(pair: Any) -> None:
    dist.all_reduce(_tensor(1024))
    dist.all_reduce(_tensor(64, 8))
    dist.broadcast(_tensor(256), src=0)
    dist.all_reduce(_tensor(32), group=pair)


def _dump(rank: int, store: Any, completed: int = 4) -> None:
    """Hand this rank's dump to the caller once the recorder shows `completed` collectives
    retired and completed: those this rank waited for (the healthy start's 4, and what its job
    end waited for). The recorder learns of a completion just after the wait returns; dumping
    before would make the last flags differ from run to run. Now and then the recorder does not
    show them for seconds (a completion it learns late, behind a hung collective): after
    SETTLE_S the dump is taken anyway, as a real dump on a timeout would be."""
    deadline = time.monotonic() + SETTLE_S
    while True:
        dump = pickle.loads(torch._C._distributed_c10d._dump_fr_trace())
        retired = sum(entry["retired"] for entry in dump["entries"])
        # Collectives complete in order within a group, so the groups' last completed sequence
        # ids add up to the number completed.
        done = sum(max(0, status["last_completed_collective"]) for status in dump["pg_status"].values())
        if min(retired, done) >= completed or time.monotonic() > deadline:
            break
        time.sleep(0.001)
    # Received here as torch wrote it, plus what the analyzer needs (see the module's docstring).
    dump["pg_config"] = _pg_config()
    dump["rank"] = rank
    store.set(f"dump/{rank}", pickle.dumps(dump))


def _pg_config() -> dict:
    """pg_config as ProcessGroupNCCL writes it: one row per group this rank belongs to."""
    from torch.distributed.distributed_c10d import _world

    config = {}
    for group in _world.pg_map:
        if group is dist.GroupMember.NON_GROUP_MEMBER:
            continue
        name = group.group_name
        config[name] = {"name": name, "desc": group.group_desc, "ranks": str(dist.get_process_group_ranks(group))}
    return dict(sorted(config.items(), key=lambda item: int(item[0])))


def _in_turn(rank: int, order: list[int], store: Any, issue: Any) -> None:
    """Issue this rank's last collective (`issue()`) and dump, after the rank before it in
    `order` has dumped: so no rank receives a peer's mismatching bytes (gloo aborts on those)
    before its own dump is taken."""
    place = order.index(rank)
    if place:
        store.wait([f"dump/{order[place - 1]}"], timedelta(seconds=TIMEOUT_S))
    issue()
    _dump(rank, store)


def _job_healthy(rank: int, world_size: int, pair: Any, store: Any) -> None:
    dist.all_reduce(_tensor(1024))
    dist.all_reduce(_tensor(32), group=pair)
    dist.all_reduce(_tensor(1))
    _dump(rank, store, completed=7)


def _job_skip_all_reduce(rank: int, world_size: int, pair: Any, store: Any) -> None:
    if rank != world_size - 1:
        dist.all_reduce(_tensor(1024), async_op=True)  # hangs: the last rank never joins
    _dump(rank, store)


def _mismatch(odd_one: Any, others: Any) -> Any:
    """A job end where the last rank issues `odd_one()` and every other rank `others()`."""

    def end(rank: int, world_size: int, pair: Any, store: Any) -> None:
        last = world_size - 1
        _in_turn(rank, list(range(world_size)), store, odd_one if rank == last else others)

    return end


def _all_reduce(*shape: int, dtype: str = "float32") -> Any:
    return lambda: dist.all_reduce(_tensor(*shape, dtype=dtype), async_op=True)


def _broadcast(*shape: int) -> Any:
    return lambda: dist.broadcast(_tensor(*shape), src=0, async_op=True)


def _job_subgroup_skip(rank: int, world_size: int, pair: Any, store: Any) -> None:
    if rank == 0:
        dist.all_reduce(_tensor(32), group=pair, async_op=True)  # hangs: rank 1 never joins
    elif rank != 1:
        dist.all_reduce(_tensor(32), group=pair)  # the other pairs complete it
    dist.all_reduce(_tensor(1024))  # the world goes on and completes
    _dump(rank, store, completed=5 if rank < 2 else 6)


_JOB_ENDS = {
    "healthy": _job_healthy,
    "skip_all_reduce": _job_skip_all_reduce,
    "broadcast_instead": _mismatch(_broadcast(1024), _all_reduce(1024)),
    "size_mismatch": _mismatch(_all_reduce(1536), _all_reduce(1024)),
    "dtype_mismatch": _mismatch(_all_reduce(1024, dtype="float64"), _all_reduce(1024)),
    "subgroup_skip": _job_subgroup_skip,
}
