"""A "1F1B" that runs every forward first, then every backward: GPipe's order, with GPipe's
bubble, but each rank holds all m microbatches' activations instead of p - rank."""
# target: schedules.py


def one_f_one_b_schedule(p, m):
    _check(p, m)
    order = [("F", mb, 0) for mb in range(m)] + [("B", mb, 0) for mb in range(m)]
    return [with_communication(order, rank, p) for rank in range(p)]
