"""Given code of module pipeline_parallel (read it): schedules as data, a schedule simulator,
and the model the grader splits into stages. Trusted: the grader runs the same code.

    from grader.models.pipeline import simulate
    result = simulate(schedule)          # F = B = W = 1; a B without its W costs B + W
    result.makespan, result.bubble_fraction, result.peak_activations

A schedule is one list of actions per rank. An action is a plain tuple (kind, microbatch, chunk):

    ("F", mb, c)        forward of microbatch mb through chunk c of this rank
    ("B", mb, c)        backward: the input gradient, and the weight gradient too unless the
                        rank's schedule also holds ("W", mb, c)
    ("W", mb, c)        the weight-gradient half of backward, when it is split from B
    ("SEND_F", mb, c)   send the output of F(mb, c) to the next stage
    ("RECV_F", mb, c)   receive the input of F(mb, c) from the previous stage
    ("SEND_B", mb, c)   send the gradient of F(mb, c)'s input to the previous stage
    ("RECV_B", mb, c)   receive the gradient of F(mb, c)'s output from the next stage

With p ranks and v chunks per rank there are p * v stages; chunk c of rank r is stage c * p + r
(Megatron's interleaving; v = 1 is the plain pipeline). Stage 0 reads the microbatch, the last
stage computes the loss inside its F.

The simulator replays a schedule with a cost per action (a chunk costs 1/v of a stage) and a
latency per message. A SEND never blocks (it is posted and the rank goes on); a RECV waits until
its message has arrived. It counts, it does not time: the same figures on every machine.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

import torch
from torch import nn

Action = tuple[str, int, int]
COMPUTE = ("F", "B", "W")
COMMUNICATION = ("SEND_F", "RECV_F", "SEND_B", "RECV_B")
KINDS = COMPUTE + COMMUNICATION

# What a receive waits for: the matching send on the neighbouring stage.
_SENT_BY = {"RECV_F": "SEND_F", "RECV_B": "SEND_B"}


class ScheduleError(ValueError):
    """A schedule that cannot run: malformed, incomplete, out of order, or deadlocked."""


def stage_of(rank: int, chunk: int, world_size: int) -> int:
    """The pipeline stage that chunk `chunk` of rank `rank` holds (chunk * p + rank)."""
    return chunk * world_size + rank


def rank_and_chunk(stage: int, world_size: int) -> tuple[int, int]:
    """The (rank, chunk) holding pipeline stage `stage`."""
    return stage % world_size, stage // world_size


def describe(action: Action) -> str:
    kind, mb, chunk = action
    return f"{kind} of microbatch {mb}" + (f" (chunk {chunk})" if chunk else "")


@dataclass(frozen=True)
class Simulation:
    """What `simulate` measured. Times are exact fractions of the cost unit."""

    makespan: Fraction
    busy: list[Fraction]  # per rank: time spent computing
    peak_activations: list[int]  # per rank: most (microbatch, chunk) activations held at once
    events: list[tuple[int, Action, Fraction, Fraction]]  # (rank, action, start, end), compute only

    @property
    def idle(self) -> list[Fraction]:
        """Per rank: time within the makespan spent not computing."""
        return [self.makespan - b for b in self.busy]

    @property
    def bubble_fraction(self) -> Fraction:
        """Idle time over all ranks / (ranks x makespan)."""
        ranks = len(self.busy)
        return sum(self.idle, Fraction(0)) / (ranks * self.makespan) if self.makespan else Fraction(0)


def _check_shape(schedule: Sequence[Sequence[Action]]) -> tuple[int, int, int]:
    """(p, m, v) of a well-formed schedule; ScheduleError otherwise."""
    if not isinstance(schedule, (list, tuple)) or not schedule:
        raise ScheduleError("a schedule is a non-empty list with one list of actions per rank")
    m = v = 0
    for rank, actions in enumerate(schedule):
        if not isinstance(actions, (list, tuple)):
            raise ScheduleError(f"rank {rank}'s schedule is a {type(actions).__name__}, not a list of actions")
        for index, action in enumerate(actions):
            ok = isinstance(action, (list, tuple)) and len(action) == 3 and action[0] in KINDS
            ok = ok and all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in action[1:])
            if not ok:
                raise ScheduleError(
                    f"rank {rank}'s action {index} is {action!r}: an action is (kind, microbatch, chunk) "
                    f"with kind one of {', '.join(KINDS)} and microbatch, chunk integers >= 0"
                )
            m, v = max(m, action[1] + 1), max(v, action[2] + 1)
    return len(schedule), m, v


def _required(rank: int, p: int, m: int, v: int) -> dict[Action, int]:
    """How many times each action must appear on `rank` (W: 0 or 1, checked apart)."""
    last = p * v - 1
    required: dict[Action, int] = {}
    for chunk in range(v):
        stage = stage_of(rank, chunk, p)
        for mb in range(m):
            required[("F", mb, chunk)] = required[("B", mb, chunk)] = 1
            for kind in ("RECV_F", "SEND_B"):
                required[(kind, mb, chunk)] = int(stage > 0)
            for kind in ("SEND_F", "RECV_B"):
                required[(kind, mb, chunk)] = int(stage < last)
    return required


def _check_complete(schedule: Sequence[Sequence[Action]], p: int, m: int, v: int) -> None:
    for rank, actions in enumerate(schedule):
        counts: dict[Action, int] = {}
        for action in actions:
            key = (action[0], action[1], action[2])
            counts[key] = counts.get(key, 0) + 1
        for action, needed in _required(rank, p, m, v).items():
            if counts.get(action, 0) != needed:
                times = {0: "never", 1: "once"}.get(needed, f"{needed} times")
                raise ScheduleError(
                    f"rank {rank} (stage {stage_of(rank, action[2], p)} of {p * v}) must run {describe(action)} "
                    f"{times}; its schedule has it {counts.get(action, 0)} times"
                )
        extra = [a for a, n in counts.items() if a[0] == "W" and n > 1]
        if extra:
            raise ScheduleError(f"rank {rank} runs {describe(extra[0])} {counts[extra[0]]} times (at most once)")


def _peer(rank: int, action: Action, p: int) -> tuple[int, Action]:
    """The rank and action at the other end of a communication action."""
    kind, mb, chunk = action
    stage = stage_of(rank, chunk, p)
    other = stage + 1 if kind in ("SEND_F", "RECV_B") else stage - 1
    peer_rank, peer_chunk = rank_and_chunk(other, p)
    partner = {"SEND_F": "RECV_F", "RECV_F": "SEND_F", "SEND_B": "RECV_B", "RECV_B": "SEND_B"}[kind]
    return peer_rank, (partner, mb, peer_chunk)


def _missing_input(action: Action, done: set[Action], first: bool, last: bool) -> str | None:
    """Why `action` cannot run yet on its rank (an input it needs was not produced), or None."""
    kind, mb, chunk = action
    needs = {
        "F": [("RECV_F", "its input")] if not first else [],
        "SEND_F": [("F", "the output it sends")],
        "B": [("F", "its activations")] + ([] if last else [("RECV_B", "its output gradient")]),
        "SEND_B": [("B", "the input gradient it sends")],
        "W": [("B", "the output gradient it uses")],
    }.get(kind, [])
    for needed, what in needs:
        if (needed, mb, chunk) not in done:
            return f"{needed} ({what})"
    return None


def simulate(
    schedule: Sequence[Sequence[Action]],
    forward: float = 1,
    backward: float = 1,
    weight: float = 1,
    latency: float = 0,
) -> Simulation:
    """Replay `schedule` (one list of actions per rank) and measure it.

    Costs: F = forward, B = backward (+ weight when the rank's schedule has no W for that
    microbatch and chunk: the full backward), W = weight, each divided by v (a chunk is 1/v of a
    stage); a message arrives `latency` after its SEND. A rank holds the activations of
    (microbatch, chunk) from its F until its B (or its W when backward is split).
    Raises ScheduleError for a malformed or incomplete schedule, an action run before its input
    exists, or a deadlock (naming every blocked rank, the microbatch and the call it waits in).
    """
    p, m, v = _check_shape(schedule)
    _check_complete(schedule, p, m, v)
    costs = {kind: Fraction(value).limit_denominator(10**6) / v for kind, value in (("F", forward), ("W", weight))}
    split_b = Fraction(backward).limit_denominator(10**6) / v
    full_b = split_b + costs["W"]
    delay = Fraction(latency).limit_denominator(10**6)
    last_stage = p * v - 1

    position = [0] * p
    clock = [Fraction(0)] * p
    busy = [Fraction(0)] * p
    held, peak = [0] * p, [0] * p
    done: list[set[Action]] = [set() for _ in range(p)]
    split = [{(a[1], a[2]) for a in actions if a[0] == "W"} for actions in schedule]
    sent: dict[tuple[int, Action], Fraction] = {}  # (receiving rank, its RECV action) -> arrival
    events: list[tuple[int, Action, Fraction, Fraction]] = []

    progress = True
    while progress:
        progress = False
        for rank in range(p):
            while position[rank] < len(schedule[rank]):
                kind, mb, chunk = schedule[rank][position[rank]]
                action = (kind, mb, chunk)
                stage = stage_of(rank, chunk, p)
                problem = _missing_input(action, done[rank], stage == 0, stage == last_stage)
                if problem:
                    raise ScheduleError(
                        f"rank {rank} runs {describe(action)} (its action {position[rank]}) before {problem}"
                    )
                if kind in _SENT_BY:
                    if (rank, action) not in sent:
                        break  # blocked: the message has not been sent yet
                    clock[rank] = max(clock[rank], sent[(rank, action)])
                elif kind in ("SEND_F", "SEND_B"):
                    peer_rank, peer_action = _peer(rank, action, p)
                    sent[(peer_rank, peer_action)] = clock[rank] + delay
                else:
                    cost = costs["F"] if kind == "F" else costs["W"] if kind == "W" else split_b
                    if kind == "B" and (mb, chunk) not in split[rank]:
                        cost = full_b
                    events.append((rank, action, clock[rank], clock[rank] + cost))
                    clock[rank] += cost
                    busy[rank] += cost
                    if kind == "F":
                        held[rank] += 1
                        peak[rank] = max(peak[rank], held[rank])
                    elif kind == "W" or (kind == "B" and (mb, chunk) not in split[rank]):
                        held[rank] -= 1
                done[rank].add(action)
                position[rank] += 1
                progress = True
    blocked = [rank for rank in range(p) if position[rank] < len(schedule[rank])]
    if blocked:
        raise ScheduleError("deadlock: " + "; ".join(_waiting(rank, schedule, position, p) for rank in blocked))
    return Simulation(max(clock), busy, peak, events)


def _waiting(rank: int, schedule: Sequence[Sequence[Action]], position: list[int], p: int) -> str:
    action = tuple(schedule[rank][position[rank]])
    peer_rank, peer_action = _peer(rank, action, p)
    return (
        f"rank {rank} waits in {describe(action)} (its action {position[rank]}) for rank {peer_rank}'s "
        f"{describe(peer_action)}"
    )


def bubble_fraction_bound(p: int, m: int, v: int = 1) -> Fraction:
    """The bubble fraction of GPipe and 1F1B, (p-1)/(m+p-1), and of the interleaved schedule
    with v chunks per rank, (p-1)/(v*m+p-1) (latency 0, B = 2F unsplit)."""
    return Fraction(p - 1, v * m + p - 1)


# --- the model the grader splits into stages ------------------------------------------------


class Dense(nn.Module):
    """x -> tanh(Linear(x)) on a single tensor."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.linear = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.linear(x))


class TwoStream(nn.Module):
    """(h, r) -> (tanh(Linear(h) + r), r + Linear(h)): a layer that takes and returns two tensors
    (the first layer of a model takes one tensor x and treats it as (x, x))."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.mix, self.carry = nn.Linear(width, width), nn.Linear(width, width)

    def forward(self, h: torch.Tensor, r: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        r = h if r is None else r
        return torch.tanh(self.mix(h) + r), r + self.carry(h)


class Chunk(nn.Module):
    """Consecutive layers of the model: forward(*inputs) feeds each layer the previous one's
    output (a tuple is unpacked); returns a tensor or a tuple of tensors."""

    def __init__(self, layers: Sequence[nn.Module]) -> None:
        super().__init__()
        self.layers = nn.ModuleList(layers)

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, ...]:
        out: torch.Tensor | tuple[torch.Tensor, ...] = inputs if len(inputs) > 1 else inputs[0]
        for layer in self.layers:
            out = layer(*out) if isinstance(out, tuple) else layer(out)
        return out


def make_layers(kind: str, num_layers: int, width: int, seed: int, dtype: torch.dtype) -> list[nn.Module]:
    """`num_layers` layers, Dense for kind "dense" and TwoStream for kind "two_stream",
    initialised from `seed`."""
    if kind not in ("dense", "two_stream"):
        raise ValueError(f"kind is 'dense' or 'two_stream', not {kind!r}")
    torch.manual_seed(seed)
    layer = Dense if kind == "dense" else TwoStream
    return [layer(width).to(dtype) for _ in range(num_layers)]


def stage_layers(num_layers: int, num_stages: int) -> list[range]:
    """The layers of each stage: consecutive, sizes differing by at most one."""
    bounds = [math.floor(i * num_layers / num_stages) for i in range(num_stages + 1)]
    return [range(bounds[i], bounds[i + 1]) for i in range(num_stages)]


def pipeline_loss(output: torch.Tensor | tuple[torch.Tensor, ...], target: torch.Tensor, batch: int) -> torch.Tensor:
    """0.5 * sum((y - target)^2) / batch, with y the output (the sum of a tuple's tensors): summed
    over a microbatch, so that the microbatches' losses add up to the whole batch's."""
    y = sum(output) if isinstance(output, tuple) else output
    return 0.5 * ((y - target) ** 2).sum() / batch
