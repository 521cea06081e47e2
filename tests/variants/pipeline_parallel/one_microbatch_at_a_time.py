"""GPipe, 1F1B and interleaved schedules that send one microbatch at a time through the whole
pipe (its forward on every stage, then its backward, then the next microbatch): valid and
correct, but every rank idles (p-1)/p of the time; and a zero-bubble schedule that keeps every
W for the end: fast, but it holds all m microbatches' activations."""
# target: schedules.py


def _one_at_a_time(p, m, v=1):
    schedule = []
    for rank in range(p):
        order = []
        for mb in range(m):
            order += [("F", mb, chunk) for chunk in range(v)] + [("B", mb, chunk) for chunk in reversed(range(v))]
        schedule.append(with_communication(order, rank, p, v))
    return schedule


def gpipe_schedule(p, m):
    _check(p, m)
    return _one_at_a_time(p, m)


def one_f_one_b_schedule(p, m):
    _check(p, m)
    return _one_at_a_time(p, m)


def interleaved_schedule(p, m, v):
    _check(p, m, v)
    if m % max(1, m // p):
        raise ValueError(f"the interleaved schedule needs m a multiple of max(1, m // p): m={m}, p={p}")
    return _one_at_a_time(p, m, v)


def zero_bubble_schedule(p, m):
    _check(p, m)
    schedule = []
    for rank in range(p):
        warmup = min(p - rank - 1, m)
        order = [("F", mb, 0) for mb in range(warmup)]
        for mb in range(warmup, m):
            order += [("F", mb, 0), ("B", mb - warmup, 0)]
        order += [("B", mb, 0) for mb in range(m - warmup, m)] + [("W", mb, 0) for mb in range(m)]
        schedule.append(with_communication(order, rank, p))
    return schedule
