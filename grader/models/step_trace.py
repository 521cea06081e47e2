"""Given code of module reliability (read it): real profiler traces of a data-parallel training
step on the CPU, with and without overlap of communication and compute.

    from grader.models.step_trace import record_step_traces
    traces = record_step_traces()          # {"overlap": trace, "no_overlap": trace}
    traces["overlap"]["traceEvents"][:3]   # what torch.profiler's export_chrome_trace writes

Each trace is rank 0's of a world of 2 gloo processes training a stack of linear layers for one
step (forward, backward, a gradient all-reduce per parameter, SGD), recorded with
torch.profiler (CPU activity) and exported as a chrome trace (json.load of the file):

- "no_overlap": backward first, then one blocking all_reduce per gradient, as a naive
  data-parallel loop does;
- "overlap": each gradient's all_reduce starts (async_op=True) as soon as backward has
  produced it, from a post-accumulate-grad hook, and the step waits for all of them at the end,
  as DDP does (lecture 2).

What the events are. Complete events ("ph": "X", with "ts" and "dur" in microseconds) of
category "cpu_op" are the operators the main thread ran (aten::mm, autograd nodes, ...; the
"c10d::allreduce_" ones only hand a collective to the process group); gloo runs each collective
on a thread of its own and records it as a "user_annotation" named "gloo:all_reduce" whose span
covers the whole collective, waiting for the peer included. NCCL's are named "nccl:all_reduce".
The profiler also writes its own span, metadata ("ph": "M") and flow events ("s", "f").
"""

from __future__ import annotations

import json
import socket
import tempfile
from pathlib import Path

from grader.models.fork_server import ForkServer

LAYERS, WIDTH, BATCH = 6, 384, 64
TIMEOUT_S = 120.0


def record_step_traces(world_size: int = 2) -> dict[str, dict]:
    """Record one training step with and without overlap on `world_size` (2 to 4) local gloo
    processes, forked from the process that imported torch once (grader/models/fork_server.py:
    a few seconds the first time, about one after); return rank 0's chrome traces as
    {"overlap": trace, "no_overlap": trace}. Raises ValueError for another world size,
    RuntimeError if the recording fails."""
    if not isinstance(world_size, int) or isinstance(world_size, bool) or not 2 <= world_size <= 4:
        raise ValueError(f"world_size must be 2, 3 or 4, not {world_size!r}")
    with tempfile.TemporaryDirectory() as folder:
        server = ForkServer.get()
        with server.job(f"{__name__}:_rank", world_size, folder, _free_port()) as pids:
            statuses = server.wait(pids, TIMEOUT_S)
        if statuses != [0] * world_size:
            ended = f"exit statuses {statuses}" if statuses else f"still running after {TIMEOUT_S:g} s"
            raise RuntimeError(f"recording the step traces failed ({ended}):\n{server.tail()}")
        return {kind: json.loads((Path(folder) / f"{kind}.json").read_text()) for kind in ("overlap", "no_overlap")}


def _train_step(overlap: bool) -> None:
    import torch
    import torch.distributed as dist

    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(WIDTH, WIDTH) for _ in range(LAYERS)])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    pending = []
    if overlap:  # start each gradient's all-reduce as soon as backward has produced it
        for parameter in model.parameters():
            parameter.register_post_accumulate_grad_hook(
                lambda p: pending.append(dist.all_reduce(p.grad, async_op=True))
            )
    model(torch.randn(BATCH, WIDTH)).square().mean().backward()
    if overlap:
        for work in pending:
            work.wait()
    else:
        for parameter in model.parameters():
            dist.all_reduce(parameter.grad)
    optimizer.step()


def _prepare() -> None:
    """Run once in the fork server before the first recording: the profiler imports
    torch._dynamo on first use (2-3 s of CPU), in the server once rather than in every rank."""
    import torch._dynamo  # noqa: F401


def _rank(rank: int, world_size: int, folder: str, port: str) -> None:
    """Rank `rank` of a recording, forked by the fork server: rank 0 writes the traces to `folder`."""
    import os

    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    for overlap in (False, True):
        _train_step(overlap)  # warm-up: the first step allocates and connects
        dist.barrier()
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            _train_step(overlap)
        if rank == 0:
            prof.export_chrome_trace(str(Path(folder) / ("overlap.json" if overlap else "no_overlap.json")))
        dist.barrier()
    dist.destroy_process_group()


def _free_port() -> int:
    """A free TCP port on 127.0.0.1 for the ranks' rendezvous."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
