"""training_pod asks for its GPUs (or MIG devices) in resources.requests only, as for CPU and
memory: the OpenAPI schema and the client's model take it, the API server refuses it (an
extended resource cannot be overcommitted: it must have a limit, and a request only equal to it).
Refused by the limits test, with a message that says why."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: containers.py
# select: containers and (requests_never_differ or kubernetes)
# fails: test_gpus_are_asked_for_in_limits_and_requests_never_differ_from_limits
# kind:
# message: is in resources.requests .* but not in resources.limits: Kubernetes refuses

_training_pod_with_limits = training_pod


def training_pod(job, rank, image, gpus, gpu_product, *args, **kwargs):
    pod = _training_pod_with_limits(job, rank, image, gpus, gpu_product, *args, **kwargs)
    resources = pod["spec"]["containers"][0]["resources"]
    gpu = {name: count for name, count in resources["limits"].items() if name.startswith("nvidia.com/")}
    resources["limits"] = {name: count for name, count in resources["limits"].items() if name not in gpu}
    resources["requests"] = gpu
    return pod
