"""Recursive halving-doubling with the nearest partner first (distance 1, 2, ...): the sum is
right, but the halves that cross nodes shrink to N/16 on 2 nodes of 8, which is not the
docstring's schedule (farthest first, N/2 through every NIC), and its bytes per link say so."""
# target: schedules.py


def recursive_halving_doubling_allreduce_schedule(ranks, nbytes):
    p = len(ranks)
    held, halving, distances = [(0, p)] * p, [], [1 << k for k in range(p.bit_length() - 1)]
    for d in distances:
        halves = [((lo, (lo + hi) // 2), ((lo + hi) // 2, hi)) for lo, hi in held]
        halving.append((1, [(ranks[i], ranks[i ^ d], *halves[i][0 if i & d else 1], "reduce") for i in range(p)]))
        held = [halves[i][1 if i & d else 0] for i in range(p)]
    doubling = []
    for d in reversed(distances):
        doubling.append((1, [(ranks[i], ranks[i ^ d], *held[i], "copy") for i in range(p)]))
        held = [(min(held[i][0], held[i ^ d][0]), max(held[i][1], held[i ^ d][1])) for i in range(p)]
    return {"op": "all_reduce", "gpus": list(ranks), "nbytes": nbytes, "chunks": p, "steps": halving + doubling}
