"""A correct torchrun_job whose command spells torchrun's options another way its parser takes:
underscores and the value as the next word (`--rdzv_endpoint H:port`, `--nproc_per_node 8`):
the same command for torchrun, so full marks."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: manifests.py
# select: (kubernetes and not bad_job and not two_node) or rendezvous_at_pod_zero
# fails: -
# kind:
# message:

_torchrun_job_with_equals = torchrun_job


def torchrun_job(name, image, nodes, gpus_per_node, command, max_restarts=3, port=29500, namespace="default"):
    service, job = _torchrun_job_with_equals(name, image, nodes, gpus_per_node, command, max_restarts, port, namespace)
    container = job["spec"]["template"]["spec"]["containers"][0]
    options = len(container["command"]) - len(command)
    spelled = ["torchrun"]
    for option in container["command"][1:options]:  # "--rdzv-endpoint=H:P" -> "--rdzv_endpoint", "H:P"
        flag, _, value = option.partition("=")
        spelled += [flag.replace("-", "_").replace("__", "--", 1), value]
    container["command"] = [*spelled, *command]
    return [service, job]
