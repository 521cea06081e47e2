"""ring_allreduce calls sys.exit(0) on every rank."""

# target: ring.py
# select: sums_in_place[2] or allreduce_time_ring_formula
# fails: sums_in_place
# kind: exit
# message: every rank: called sys\.exit\(0\)

import sys


def ring_allreduce(tensor, group=None):
    sys.exit(0)
