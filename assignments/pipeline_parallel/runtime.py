# Your working copy: replace every `raise NotImplementedError` with your implementation.
# (Generated from the course's reference by `python -m grader sync`.)
"""Running a schedule on real ranks (lecture 08, section 7).

Each rank holds its stage (or its v chunks) and executes its list of actions in order:
activations travel forward and gradients backward in point-to-point messages, and every rank's
weight gradients accumulate over the microbatches, so that after the schedule they equal those
of one process running the whole model on the whole batch (for a loss that sums over the
microbatches). What a rank keeps between an F and its backward is exactly what the schedule's
memory figure counts: drop it as soon as the backward has used it.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable, Sequence
from typing import ClassVar

import torch
import torch.distributed as dist
from torch import nn

from grader.models.pipeline import Action, Chunk, make_layers, pipeline_loss, stage_layers, stage_of

Tensors = tuple[torch.Tensor, ...]

_DTYPES = [torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32]


def message_tag(kind: str, microbatch: int, boundary: int) -> int:
    """Given: the tag of the message carrying, for `microbatch`, the activation (kind "F") or
    the gradient (kind "B") across the boundary between stage `boundary` and stage boundary + 1.
    Two ranks may exchange several messages at once (activations one way, gradients the other,
    several chunks): the tag keeps each receive matched to its own send."""
    return (microbatch * 4096 + boundary) * 2 + (kind == "B")


def send_tensors(tensors: Tensors, dst: int, tag: int) -> list[_PostedSend]:
    """Given: post non-blocking sends (dist.isend) of `tensors` to GLOBAL rank `dst` (its rank in
    the world, whatever group the pipeline runs in: see run_schedule): a header (how
    many tensors, each one's dtype and shape), then each tensor. Returns the requests (each a
    dist.Work that remembers its wait()): the tensors must stay alive and unchanged until each
    request's wait() returned (wait on all of them before run_schedule returns)."""
    header = [len(tensors)]
    for t in tensors:
        header += [_DTYPES.index(t.dtype), t.dim(), *t.shape]
    head = torch.tensor(header, dtype=torch.int64, device=_device())
    length = torch.tensor([len(header)], dtype=torch.int64, device=_device())
    works = [dist.isend(length, dst, tag=tag), dist.isend(head, dst, tag=tag)]
    works += [dist.isend(t.contiguous(), dst, tag=tag) for t in tensors]
    return [_PostedSend(work) for work in works]


class _PostedSend:
    """Given: a posted send (a dist.Work) that remembers whether wait() was called on it, so
    that train_pipeline can report the sends run_schedule never waited on."""

    posted: ClassVar[list[_PostedSend]] = []  # every send since train_pipeline last cleared it

    def __init__(self, work: dist.Work) -> None:
        self.work, self.waited = work, False
        _PostedSend.posted.append(self)

    def wait(self, *args, **kwargs) -> bool:
        self.waited = True
        return self.work.wait(*args, **kwargs)

    def __getattr__(self, name: str):
        return getattr(self.work, name)


def recv_tensors(src: int, tag: int) -> Tensors:
    """Given: receive (blocking) the tensors that send_tensors sent from GLOBAL rank `src` with `tag`."""
    length = torch.empty(1, dtype=torch.int64, device=_device())
    dist.recv(length, src, tag=tag)
    header = torch.empty(int(length), dtype=torch.int64, device=_device())
    dist.recv(header, src, tag=tag)
    values, tensors, i = header.tolist(), [], 1
    for _ in range(values[0]):
        dtype, ndim = _DTYPES[values[i]], values[i + 1]
        tensor = torch.empty(values[i + 2 : i + 2 + ndim], dtype=dtype, device=_device())
        dist.recv(tensor, src, tag=tag)
        tensors.append(tensor)
        i += 2 + ndim
    return tuple(tensors)


def _device() -> torch.device:
    """Given: where messages live: the current GPU under NCCL, else the CPU (gloo)."""
    return torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")


def run_schedule(
    stage: nn.Module,
    schedule: Sequence[Sequence[Action]],
    microbatches: Sequence[torch.Tensor],
    loss_fn: Callable[[torch.Tensor | Tensors, int], torch.Tensor],
    group: dist.ProcessGroup | None = None,
) -> list[tuple[Action, float, float]]:
    """Execute this rank's list of actions, schedule[rank], in order, in the pipeline `group` of
    p = len(schedule) ranks (None: the default group, the whole world).

    - The pipeline group: its rank i (dist.get_rank(group)) is "rank" i of the schedule and holds
      stage i (and stages i + p, ... when v > 1). In a 3D-parallel run each pipeline is one such
      group (the ranks with the same data- and tensor-parallel coordinates), and several run at
      once, so a rank's neighbours are the group's ranks i - 1 and i + 1, whose GLOBAL ranks
      (dist.get_global_rank(group, i - 1), ...) are what send_tensors and recv_tensors take.

    - stage: this rank's chunks, an nn.ModuleList of v modules (chunk c is stage c*p + rank),
      or, when v = 1, the stage's module itself. A chunk's forward takes the tensors the
      previous stage's forward returned (a tuple is passed as separate arguments) and returns
      a tensor or a tuple of tensors.
    - microbatches: the inputs of stage 0, one tensor per microbatch (used by rank 0 only).
    - loss_fn(output, mb): the loss of microbatch mb from the last stage's output; the last
      stage computes it inside its F, and its B backpropagates from it.
    - Communication: SEND_F / SEND_B post send_tensors(...) (never blocking); RECV_F / RECV_B
      call recv_tensors(...), with message_tag's tag. Each activation and each gradient
      crosses a stage boundary exactly once per microbatch.
    - B computes the input gradient (sent by SEND_B) and, unless the rank's schedule holds
      W(mb, c), the weight gradient too; W then computes the weight gradient. Weight gradients
      accumulate in the parameters' .grad over the microbatches: after the schedule they equal
      those of the whole model on the whole batch for the summed loss.
    - Split backward: a B whose W(mb, c) is in the schedule leaves chunk c's .grad untouched
      and keeps the graph (torch.autograd.grad(..., retain_graph=True)); that W adds
      microbatch mb's weight gradient. Each weight gradient is in .grad as soon as its action
      (W, or the unsplit B) ran: the next forward of the chunk sees it.
    - Memory: what F keeps for backward (its graph, its input and output) is freed as soon as
      the backward that needs it ran (B, or W when backward is split), and not before: each
      rank holds exactly the simulator's peak of activations for the schedule.
    - Every send is waited on before returning.

    Returns, per executed action in order, (action, start, end): time.perf_counter() seconds
    when it started and ended. Raises ValueError if len(schedule) is not the size of `group`.
    """
    raise NotImplementedError("implement run_schedule (lectures/08-pipeline-parallelism.md, section 7)")


# (Write any helper functions you need here.)


class _CountedChunk(nn.Module):
    """Given: a chunk whose forward counts as one held activation until autograd lets go of
    everything it saved for backward (torch.autograd.graph.saved_tensors_hooks), and records,
    as each forward starts, a copy of its parameters' .grad (None where there is none)."""

    def __init__(self, chunk: nn.Module, counter: _LiveCounter) -> None:
        super().__init__()
        self.chunk, self.counter = chunk, counter
        self.grads_seen: list[list[torch.Tensor | None]] = []

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor | Tensors:
        self.grads_seen.append([None if q.grad is None else q.grad.detach().clone() for q in self.chunk.parameters()])
        token = self.counter.hold()
        with torch.autograd.graph.saved_tensors_hooks(lambda t: (token, t), lambda packed: packed[1]):
            return self.chunk(*inputs)


class _LiveCounter:
    """Given: forwards whose saved tensors are still alive, and the most at once."""

    def __init__(self) -> None:
        self.live = self.peak = 0

    def hold(self) -> object:
        token = type("Held", (), {})()
        self.live += 1
        self.peak = max(self.peak, self.live)
        weakref.finalize(token, self.release)
        return token

    def release(self) -> None:
        self.live -= 1


def train_pipeline(
    schedule_from: str,
    schedule: Sequence,
    kind: str,
    num_layers: int,
    seed: int,
    inputs: torch.Tensor,
    targets: torch.Tensor,
    group: dist.ProcessGroup | None = None,
) -> dict[str, object]:
    """Given (the grader calls it on every rank): one training step of the course's model
    (grader.models.pipeline.make_layers(kind, num_layers, width, seed), width and dtype those
    of `inputs`) cut into p*v stages of consecutive layers, run by run_schedule in the pipeline
    `group` (None: the world; p is its size and this rank's stages follow its group rank).

    schedule_from "run_schedule": `schedule` is the schedule to run; otherwise the name of a
    function of schedules.py and `schedule` its arguments (its schedule is run). The batch is
    cut into m microbatches (m = the schedule's, sizes differing by at most one) and the loss
    is pipeline_loss. Returns {"grads": {"layers.i.name": gradient} for this rank's layers,
    "peak_live": the most forwards whose saved tensors were alive at once, "live_after": those
    still alive after run_schedule returned, "sends_not_waited": how many of the requests
    send_tensors returned run_schedule left without calling wait() on, "timeline":
    run_schedule's result, "grads_seen": per chunk, per forward of it in the order they ran,
    {"layers.i.name": its .grad as that forward started (None: no gradient yet)}}.
    """
    if schedule_from != "run_schedule":
        import schedules

        schedule = getattr(schedules, schedule_from)(*schedule)
    rank, p = dist.get_rank(group), dist.get_world_size(group)
    m = 1 + max(a[1] for actions in schedule for a in actions)
    v = 1 + max(a[2] for actions in schedule for a in actions)
    layers = [layer.to(inputs.device) for layer in make_layers(kind, num_layers, inputs.shape[-1], seed, inputs.dtype)]
    counter = _LiveCounter()
    owned = {c: stage_layers(num_layers, p * v)[stage_of(rank, c, p)] for c in range(v)}
    chunks = nn.ModuleList(_CountedChunk(Chunk([layers[i] for i in owned[c]]), counter) for c in range(v))
    pieces = list(zip(inputs.tensor_split(m), targets.tensor_split(m)))
    batch = inputs.shape[0]

    def loss_fn(output: torch.Tensor | Tensors, mb: int) -> torch.Tensor:
        return pipeline_loss(output, pieces[mb][1], batch)

    _PostedSend.posted.clear()
    timeline = run_schedule(chunks if v > 1 else chunks[0], schedule, [x for x, _ in pieces], loss_fn, group=group)
    not_waited = [send for send in _PostedSend.posted if not send.waited]
    for send in not_waited:  # out before the next case's step (only these: a second wait() on a gloo send hangs)
        send.work.wait()
    grads = {
        f"layers.{i}.{name}": param.grad
        for c in range(v)
        for i in owned[c]
        for name, param in layers[i].named_parameters()
    }
    names = {c: [f"layers.{i}.{name}" for i in owned[c] for name, _ in layers[i].named_parameters()] for c in range(v)}
    seen = [[dict(zip(names[c], grads_then)) for grads_then in chunks[c].grads_seen] for c in range(v)]
    return {
        "grads": grads,
        "peak_live": counter.peak,
        "live_after": counter.live,
        "sends_not_waited": len(not_waited),
        "timeline": timeline,
        "grads_seen": seen,
    }
