"""training_pod without the memory-backed /dev/shm volume: a pod every schema takes, whose container
gets the runtime's 64 MiB /dev/shm, where NCCL's shared-memory transport and DataLoader workers
crash. Refused by the /dev/shm test, with a message that says why."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: containers.py
# select: containers and (memory_backed_dev_shm or kubernetes)
# fails: test_the_container_gets_a_memory_backed_dev_shm_of_the_given_size
# kind:
# message: mounts no volume at /dev/shm.*64 MiB.*NCCL

_training_pod_with_shm = training_pod


def training_pod(job, rank, image, gpus, gpu_product, *args, **kwargs):
    pod = _training_pod_with_shm(job, rank, image, gpus, gpu_product, *args, **kwargs)
    del pod["spec"]["volumes"]
    del pod["spec"]["containers"][0]["volumeMounts"]
    return pod
