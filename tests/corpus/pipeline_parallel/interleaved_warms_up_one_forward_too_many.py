"""An interleaved schedule with one warm-up forward more than 2(p-r-1) + (v-1)b on every rank that has a backward left to alternate with: valid and as fast, but each such rank holds one chunk's activations more than lecture 08's 11, 9, 7, 5 at p = 4, m = 8, v = 2."""

# ruff: noqa: E501, F821 - a fragment appended to a solution file, whose names are in scope
# target: schedules.py
# select: interleaved and not real_ranks and not run_schedule and not your_schedule
# fails: test_interleaved_schedule_halves_the_bubble_with_two_chunks|test_interleaved_schedule_holds_2_p_minus_r_minus_1|test_interleaved_schedule_orders_f_and_b_as_torch|test_schedules_follow_the_order_their_docstring_gives\[interleaved
# kind:
# message: interleaved_schedule\(4, 8, 2\): peak activations per rank \[12, 10, 8, 6\] \(chunks\), expected 2\(p-r-1\) \+ \(v-1\)b \+ 1 = \[11, 9, 7, 5\]


def interleaved_schedule(p, m, v):
    _check(p, m, v)
    rounds = max(1, m // p)
    if m % rounds:
        raise ValueError(f"m must be a multiple of max(1, m // p) = {rounds}")
    size = m // rounds
    forwards = _interleaved_order(m, v, size)
    total = m * v
    schedule = []
    for rank in range(p):
        warmup = min(2 * (p - rank - 1) + (v - 1) * size + 1, total)
        order = [("F", *forwards[k]) for k in range(warmup)]
        for k in range(warmup, total):
            mb, chunk = forwards[k - warmup]
            order += [("F", *forwards[k]), ("B", mb, v - 1 - chunk)]
        order += [("B", mb, v - 1 - chunk) for mb, chunk in forwards[total - warmup :]]
        schedule.append(with_communication(order, rank, p, v))
    return schedule
