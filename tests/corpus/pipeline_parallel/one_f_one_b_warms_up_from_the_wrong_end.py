"""A 1F1B whose warm-up is counted from the wrong end (rank r runs r warm-up forwards, not p-r-1): the first rank waits for a gradient while the last waits for an activation, and the simulator names both."""

# ruff: noqa: E501, F821 - a fragment appended to a solution file, whose names are in scope
# target: schedules.py
# select: test_one_f_one_b_schedule_has_gpipes_bubble_holding_at_most_p_minus_rank_activations
# fails: test_one_f_one_b_schedule_has_gpipes_bubble_holding_at_most_p_minus_rank_activations
# kind:
# message: one_f_one_b_schedule\(2, 2\): the simulator refuses the schedule: deadlock: rank 0 waits in RECV_B of microbatch 0 \(its action 2\) for rank 1's SEND_B of microbatch 0; rank 1 waits in RECV_F of microbatch 1 \(its action 2\) for rank 0's SEND_F of microbatch 1


def one_f_one_b_schedule(p, m):
    _check(p, m)
    schedule = []
    for rank in range(p):
        warmup = min(rank, m)
        order = [("F", mb, 0) for mb in range(warmup)]
        for mb in range(warmup, m):
            order += [("F", mb, 0), ("B", mb - warmup, 0)]
        order += [("B", mb, 0) for mb in range(m - warmup, m)]
        schedule.append(with_communication(order, rank, p))
    return schedule
