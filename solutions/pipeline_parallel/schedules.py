"""Pipeline schedules as data (lecture 08, sections 3 to 6).

A schedule is one list of actions per rank; an action is a tuple (kind, microbatch, chunk), see
grader/models/pipeline.py (read it: it also holds the simulator that replays a schedule). Every
schedule here places its communication the same way, next to the computation it serves:

    RECV_F(mb, c)  right before F(mb, c)   (not on the first stage)
    SEND_F(mb, c)  right after  F(mb, c)   (not on the last stage)
    RECV_B(mb, c)  right before B(mb, c)   (not on the last stage)
    SEND_B(mb, c)  right after  B(mb, c)   (not on the first stage)

A SEND never blocks, so a schedule deadlocks only if its ranks order their computations
inconsistently, which the simulator reports.
"""

from __future__ import annotations

from grader.models.pipeline import Action, stage_of


def _check(p: int, m: int, v: int = 1) -> None:
    for name, value in (("p", p), ("m", m), ("v", v)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, not {value!r}")


def with_communication(order: list[tuple[str, int, int]], rank: int, p: int, v: int = 1) -> list[Action]:
    """Given: `order` (this rank's F, B and W actions) with each SEND and RECV placed next to the
    computation it serves (see the module's docstring)."""
    last = p * v - 1
    actions: list[Action] = []
    for kind, mb, chunk in order:
        stage = stage_of(rank, chunk, p)
        if kind == "F" and stage > 0:
            actions.append(("RECV_F", mb, chunk))
        if kind == "B" and stage < last:
            actions.append(("RECV_B", mb, chunk))
        actions.append((kind, mb, chunk))
        if kind == "F" and stage < last:
            actions.append(("SEND_F", mb, chunk))
        if kind == "B" and stage > 0:
            actions.append(("SEND_B", mb, chunk))
    return actions


def gpipe_schedule(p: int, m: int) -> list[list[Action]]:
    """GPipe (Huang et al. 2019): every rank runs the forwards of microbatches 0..m-1, then their
    backwards in the same order (B unsplit, no W), with communication placed by
    with_communication. Each rank holds the activations of all m microbatches at its peak;
    the bubble fraction is (p-1)/(m+p-1) when B costs 2F.
    Raises ValueError unless p and m are integers >= 1.
    """
    ### BEGIN SOLUTION
    _check(p, m)
    order = [("F", mb, 0) for mb in range(m)] + [("B", mb, 0) for mb in range(m)]
    return [with_communication(order, rank, p) for rank in range(p)]
    ### END SOLUTION


def one_f_one_b_schedule(p: int, m: int) -> list[list[Action]]:
    """1F1B, as in PipeDream-Flush (Narayanan et al. 2021): rank r first runs min(p-r-1, m)
    warm-up forwards, then alternates one forward and one backward (the oldest microbatch
    first) until every forward ran, then runs the remaining backwards (B unsplit, no W).
    Communication placed by with_communication. Rank r holds at most min(p-r, m) microbatches'
    activations; the bubble fraction is GPipe's, (p-1)/(m+p-1).
    Raises ValueError unless p and m are integers >= 1.
    """
    ### BEGIN SOLUTION
    _check(p, m)
    schedule = []
    for rank in range(p):
        warmup = min(p - rank - 1, m)
        order = [("F", mb, 0) for mb in range(warmup)]
        for mb in range(warmup, m):
            order += [("F", mb, 0), ("B", mb - warmup, 0)]
        order += [("B", mb, 0) for mb in range(m - warmup, m)]
        schedule.append(with_communication(order, rank, p))
    return schedule
    ### END SOLUTION


def interleaved_schedule(p: int, m: int, v: int) -> list[list[Action]]:
    """Megatron's interleaved 1F1B (Narayanan et al. 2021), as torch.distributed.pipelining's
    ScheduleInterleaved1F1B orders it: rank r holds v chunks, chunk c being stage c*p + r.
    Microbatches go in rounds of b = m / max(1, m // p) consecutive microbatches (b = p when p
    divides m, as in Megatron; otherwise fewer, larger rounds, b > p, or one round of b = m < p):
    the k-th forward of a rank runs, within its round, every microbatch of the round through
    chunk 0, then all of them through chunk 1, and so on; the k-th backward takes the same
    (microbatch, chunk) order with the chunks reversed (v-1 first). Rank r runs
    min(2(p-r-1) + (v-1)b, m*v) warm-up forwards, then alternates forward and backward, then
    runs the remaining backwards (B unsplit, no W). Communication placed by
    with_communication. For m >= p the bubble fraction is (p-1)/(v*m+p-1), about 1/v of 1F1B's;
    a larger round costs memory instead ((v-1)(b-p) more warm-up forwards). Rank r holds
    min(2(p-r-1) + (v-1)b + 1, m*v) chunks' activations at its peak (11, 9, 7, 5 at p = 4,
    m = 8, v = 2). The rounds must be
    equal: m = 5 on p = 2 would leave rounds of 2 and 3, which torch refuses too.
    Raises ValueError unless p, m and v are integers >= 1 and m is a multiple of max(1, m // p).
    """
    ### BEGIN SOLUTION
    _check(p, m, v)
    rounds = max(1, m // p)
    if m % rounds:
        raise ValueError(f"the interleaved schedule needs m a multiple of its {rounds} rounds (max(1, m // p)): m={m}")
    size = m // rounds  # b, microbatches per round
    forwards = _interleaved_order(m, v, size)
    total = m * v
    schedule = []
    for rank in range(p):
        warmup = min(2 * (p - rank - 1) + (v - 1) * size, total)
        order = [("F", *forwards[k]) for k in range(warmup)]
        for k in range(warmup, total):
            mb, chunk = forwards[k - warmup]
            order += [("F", *forwards[k]), ("B", mb, v - 1 - chunk)]
        order += [("B", mb, v - 1 - chunk) for mb, chunk in forwards[total - warmup :]]
        schedule.append(with_communication(order, rank, p, v))
    return schedule
    ### END SOLUTION


### BEGIN SOLUTION
def _interleaved_order(m: int, v: int, size: int) -> list[tuple[int, int]]:
    """(microbatch, chunk) of a rank's forwards, in order: per round of `size` microbatches,
    the whole round through chunk 0, then through chunk 1, ..."""
    order = []
    for first in range(0, m, size):
        order += [(mb, chunk) for chunk in range(v) for mb in range(first, first + size)]
    return order


### END SOLUTION


def zero_bubble_schedule(p: int, m: int) -> list[list[Action]]:
    """ZB-H1 (Qi et al. 2023): backward split into B (input gradient, on the critical path) and
    W (weight gradient, which can wait). Each rank runs 1F1B's order of F and B; each W is put
    off to fill what would be idle time, but a rank never holds more than min(p, m)
    microbatches' activations (1F1B's peak): before a forward that would exceed it, the rank
    first runs the oldest pending W. From the B that comes right after the rank's last forward
    on (that B included: on rank p-1 it is the B of microbatch m-1), each B is immediately
    followed by the oldest pending W; the W still pending after the last B then run at the end,
    oldest first. Communication placed by with_communication. With F = B = W and m >= p its
    makespan is at most m(F+B+W) + (p-1)(F+B-W), below 1F1B's m(F+B+W) + (p-1)(F+B+W): 27
    against 33 at p = 4, m = 8.
    Raises ValueError unless p and m are integers >= 1.
    """
    ### BEGIN SOLUTION
    _check(p, m)
    cap = min(p, m)
    schedule = []
    for rank, actions in enumerate(one_f_one_b_schedule(p, m)):
        order: list[tuple[str, int, int]] = []
        pending: list[int] = []  # microbatches whose B ran and W did not
        held, forwards_left = 0, m
        for kind, mb, _ in actions:
            if kind == "F":
                if held == cap:
                    order.append(("W", pending.pop(0), 0))
                    held -= 1
                order.append(("F", mb, 0))
                held += 1
                forwards_left -= 1
            elif kind == "B":
                order.append(("B", mb, 0))
                pending.append(mb)
                if forwards_left == 0:
                    order.append(("W", pending.pop(0), 0))
                    held -= 1
        order += [("W", mb, 0) for mb in pending]
        schedule.append(with_communication(order, rank, p))
    return schedule
    ### END SOLUTION
