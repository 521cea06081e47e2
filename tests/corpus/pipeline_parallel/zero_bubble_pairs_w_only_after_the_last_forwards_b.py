"""A zero-bubble schedule that reads "once every forward ran" as "from the first B with no forward before it": the B right after each rank's last forward gets no W, and the makespan at p = 4, m = 8 is 28, not the lecture's 27 (above the paper's bound, which the hidden suite checks at several sizes)."""

# ruff: noqa: E501, F821 - a fragment appended to a solution file, whose names are in scope
# target: schedules.py
# select: zero_bubble and not real_ranks and not run_schedule
# fails: test_zero_bubble_is_faster_than_one_f_one_b_at_the_same_peak_memory|test_zero_bubble_schedule_beats_one_f_one_b|test_schedules_follow_the_order_their_docstring_gives\[zero_bubble_schedule
# kind:
# message: zero_bubble_schedule\(3, 5\): rank 0's action 18 is \('RECV_B', 3, 0\), expected \('W', 2, 0\)


def zero_bubble_schedule(p, m):
    _check(p, m)
    cap = min(p, m)
    schedule = []
    for rank, actions in enumerate(one_f_one_b_schedule(p, m)):
        order, pending, held, forwards_left, previous = [], [], 0, m, None
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
                if forwards_left == 0 and previous != "F":
                    order.append(("W", pending.pop(0), 0))
                    held -= 1
            if kind in ("F", "B"):
                previous = kind
        order += [("W", mb, 0) for mb in pending]
        schedule.append(with_communication(order, rank, p))
    return schedule
