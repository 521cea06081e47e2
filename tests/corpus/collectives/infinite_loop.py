"""allreduce_time (a single-process function) never returns."""


# target: cost_model.py
# select: allreduce_time_ring_formula or allreduce_time_matches_hand_computed and ring-p4 or sums_in_place[2]
# fails: allreduce_time
# kind: timeout
# message: allreduce_time did not finish within [\d.]+ s; it was at:\n  cost_model\.py:\d+ in allreduce_time\(\)


def allreduce_time(algorithm, world_size, nbytes, alpha, beta):
    while True:
        pass
