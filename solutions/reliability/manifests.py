"""A multi-node torchrun job as Kubernetes manifests (lecture 14-reliability, section 8. On
Kubernetes: a torchrun job as manifests).

Kubernetes runs a training job of N nodes as two objects (https://kubernetes.io/docs/):

- An Indexed Job ("Job" in batch/v1, `completionMode: Indexed`): N pods that run at once
  (parallelism = completions = N), each with a completion index 0 .. N-1 that Kubernetes puts
  in the pod's annotation `batch.kubernetes.io/job-completion-index` and in the environment
  variable JOB_COMPLETION_INDEX, and a stable hostname `<job name>-<index>`.
- A headless Service (`clusterIP: None`): no virtual IP and no load balancing, only DNS
  records. A pod whose `subdomain` names the Service gets the DNS name
  `<hostname>.<subdomain>.<namespace>.svc.cluster.local` (the cluster's default domain), so pod
  0 can be found at `<job>-0.<service>.<namespace>.svc.cluster.local` before anyone knows its IP,
  and again after it is replaced.

Every pod runs the same torchrun command. With the c10d rendezvous backend, the torchrun agent
whose host name is the rendezvous endpoint's host (pod 0) serves the rendezvous store, the
others join it, and the rendezvous hands out the node ranks; when a worker fails, every agent
restarts its workers and rendezvouses again, up to --max-restarts times. GPUs come from the
NVIDIA device plugin, which advertises each node's GPUs as the extended resource
`nvidia.com/gpu`: a container gets GPUs only by asking for them in `resources.limits`.
"""

from __future__ import annotations

import re

# RFC 1035 label, as Kubernetes checks Service names: lowercase letters, digits and '-',
# starting with a letter, not ending with '-', at most 63 characters.
DNS_1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
# RFC 1123 label, as Kubernetes checks namespaces and hostnames: may also start with a digit.
DNS_1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
MAX_LABEL = 63
CLUSTER_DOMAIN = "cluster.local"
GPU_RESOURCE = "nvidia.com/gpu"  # the NVIDIA device plugin's extended resource
# The label the Job controller puts on every pod of a Job (Kubernetes >= 1.27; older releases
# only set the legacy `job-name`, which newer ones still set too).
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"


def _whole(value: object) -> bool:
    """True for an int that is not a bool (True is an int in Python, but not a count)."""
    return isinstance(value, int) and not isinstance(value, bool)


def torchrun_job(
    name: str,
    image: str,
    nodes: int,
    gpus_per_node: int,
    command: list[str],
    max_restarts: int = 3,
    port: int = 29500,
    namespace: str = "default",
) -> list[dict]:
    """The manifests of a torchrun job of `nodes` pods, as plain dicts (what `kubectl apply -f`
    reads, parsed): `[service, job]`, in that order. The schema reference is the official
    Kubernetes Python client (package `kubernetes`): each dict must load with its model
    (`kubernetes.client.V1Service.from_dict`, `V1Job.from_dict`) with no field dropped or
    changed, so field names are the API's camelCase ones and a quantity such as a GPU count is
    a string ("8"), as the schema types it. The fields listed below are graded; any other field
    is yours to add (the solution also sets `publishNotReadyAddresses`, a container port and a
    /dev/shm volume), as long as the schema takes it.

    `command` is what torchrun runs on every worker: the training script and its arguments, e.g.
    ["/workspace/train.py", "--steps=100"]. With H = `<name>-0.<name>.<namespace>.svc.cluster.local`
    (pod 0's DNS name) and P = gpus_per_node, or 1 when gpus_per_node is 0:

    service: apiVersion "v1", kind "Service", metadata {name: name, namespace: namespace};
        spec.clusterIP "None" (headless); spec.selector = labels that every pod of the Job
        carries: {"batch.kubernetes.io/job-name": name}, the label Kubernetes puts on a Job's
        pods (the legacy "job-name", or labels set in the pod template, select them too);
        spec.ports has a port `port`.
    job: apiVersion "batch/v1", kind "Job", metadata {name: name, namespace: namespace};
        spec.completionMode "Indexed", spec.completions = spec.parallelism = nodes,
        spec.backoffLimit = max_restarts (the Job replaces failed pods at most max_restarts times
        in all: the same budget torchrun has for restarting workers);
        spec.template.spec: subdomain = name (the Service's name: this is what gives each pod
        its DNS name), restartPolicy "Never" (a failed pod is replaced, not restarted in place,
        and counts against backoffLimit), and one container with image `image`,
        resources.limits {"nvidia.com/gpu": str(gpus_per_node)} (no "nvidia.com/gpu" at all,
        in limits or requests, when gpus_per_node is 0: a CPU-only job), no `args`, and
        `command` exactly (no shell):
            ["torchrun", "--nnodes=<nodes>", "--nproc-per-node=<P>", "--rdzv-backend=c10d",
             "--rdzv-endpoint=<H>:<port>", "--rdzv-id=<name>", "--max-restarts=<max_restarts>",
             *command]
        The command is read with torchrun's own argument parser, so `--nproc_per_node 8` means
        the same as `--nproc-per-node=8`; no other torchrun option may be set.

    There is no --node-rank: with the c10d backend the rendezvous assigns node ranks and
    torchrun ignores --node-rank (it warns). The completion index matters through the hostname:
    pod 0, the one named in the endpoint, serves the rendezvous.

    Raises ValueError when: `name` is not an RFC 1035 label (lowercase letters, digits and '-',
    starting with a letter, not ending with '-') or `<name>-<nodes - 1>`, the last pod's
    hostname, is longer than 63 characters; `namespace` is not an RFC 1123 label of at most 63
    characters; `image` is not a non-empty string; `nodes` is not an integer >= 1;
    `gpus_per_node` is not an integer >= 0; `command` is not a non-empty list of strings;
    `max_restarts` is not an integer >= 0; `port` is not an integer in 1 .. 65535 (bool is not
    an integer here).
    """
    ### BEGIN SOLUTION
    if not _whole(nodes) or nodes < 1:
        raise ValueError(f"nodes must be an integer >= 1, not {nodes!r}")
    if not isinstance(name, str) or not DNS_1035_LABEL.fullmatch(name):
        raise ValueError(
            f"name must be an RFC 1035 label (lowercase letters, digits and '-', starting with a letter, "
            f"not ending with '-'), not {name!r}"
        )
    # Indexed Job pods are named <job>-<index> as hostnames, and a hostname is a DNS label.
    if len(f"{name}-{nodes - 1}") > MAX_LABEL:
        raise ValueError(
            f"name {name!r} is too long: the hostname of pod {nodes - 1}, {name}-{nodes - 1!s}, would exceed "
            f"{MAX_LABEL} characters"
        )
    if not isinstance(namespace, str) or len(namespace) > MAX_LABEL or not DNS_1123_LABEL.fullmatch(namespace):
        raise ValueError(f"namespace must be an RFC 1123 label of at most {MAX_LABEL} characters, not {namespace!r}")
    if not isinstance(image, str) or not image:
        raise ValueError(f"image must be a non-empty string, not {image!r}")
    if not _whole(gpus_per_node) or gpus_per_node < 0:
        raise ValueError(f"gpus_per_node must be an integer >= 0, not {gpus_per_node!r}")
    if not isinstance(command, list) or not command or not all(isinstance(part, str) for part in command):
        raise ValueError(
            f"command must be a non-empty list of strings (the training script and its arguments), not {command!r}"
        )
    if not _whole(max_restarts) or max_restarts < 0:
        raise ValueError(f"max_restarts must be an integer >= 0, not {max_restarts!r}")
    if not _whole(port) or not 1 <= port <= 65535:
        raise ValueError(f"port must be an integer in 1 .. 65535, not {port!r}")

    # One name for the Job and its Service (they are different kinds, so they may share it).
    service_name = name
    rendezvous_host = f"{name}-0.{service_name}.{namespace}.svc.{CLUSTER_DOMAIN}"
    # A CPU-only job runs one worker per pod; otherwise one worker per GPU.
    workers_per_pod = gpus_per_node if gpus_per_node > 0 else 1

    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": service_name, "namespace": namespace},
        "spec": {
            "clusterIP": "None",  # headless: DNS records for the pods, no virtual IP
            "selector": {JOB_NAME_LABEL: name},
            # Publish a pod's DNS record as soon as it has an IP, not once it is Ready: the other
            # pods look pod 0 up while it is still starting.
            "publishNotReadyAddresses": True,
            "ports": [{"name": "c10d", "port": port, "targetPort": port}],
        },
    }

    torchrun = [
        "torchrun",
        f"--nnodes={nodes}",
        f"--nproc-per-node={workers_per_pod}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint={rendezvous_host}:{port}",
        f"--rdzv-id={name}",
        f"--max-restarts={max_restarts}",
        *command,
    ]
    container: dict = {
        "name": "trainer",
        "image": image,
        "command": torchrun,  # `command` replaces the image's entrypoint; no shell, no `args`
        "ports": [{"name": "c10d", "containerPort": port}],
        # NCCL and DataLoader workers share memory through /dev/shm, which a container runtime
        # gives 64 MiB by default: mount a memory-backed volume there instead.
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
    }
    if gpus_per_node > 0:
        # Extended resources are whole numbers, set in limits (requests default to limits);
        # the scheduler places the pod on a node whose device plugin has that many free GPUs.
        container["resources"] = {"limits": {GPU_RESOURCE: str(gpus_per_node)}}

    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "completionMode": "Indexed",  # pods 0 .. nodes-1, hostnames <name>-<index>
            "completions": nodes,
            "parallelism": nodes,  # all at once: a rendezvous of nodes needs every one of them
            "backoffLimit": max_restarts,
            "template": {
                "spec": {
                    "subdomain": service_name,  # gives each pod <hostname>.<service>.<ns>.svc... in DNS
                    "restartPolicy": "Never",
                    "containers": [container],
                    "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory"}}],
                },
            },
        },
    }
    return [service, job]
    ### END SOLUTION
