"""allreduce_time never returns."""
# target: cost_model.py


def allreduce_time(algorithm, world_size, nbytes, alpha, beta):
    while True:
        pass
