"""The hidden suite's view of a node's CDI spec and of a training rank's pod, written apart from
the solution.

CDI: the JSON schema grader/models/data/cdi_schema.json (written for the course from the CDI
specification v0.7.0; see grader/models/data/README.md), and the devices a node must have, in
the docstring's order (`expected_devices`).

Pods: the official client's model V1Pod (loaded and written back unchanged, as module reliability
checks its manifests: grader/suites/reliability/k8s_reference.py), Kubernetes' OpenAPI schema
through kubernetes_validate (strict: no unknown field), and what the scheduler and the kubelet
would do with the pod, emulated: which taints it tolerates, which nodes its required node
affinity admits, which extended resources it gets, what its container sees at /dev/shm.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from grader.suites.reliability.k8s_reference import differences, dig, load_model

CDI_SCHEMA = Path(__file__).resolve().parents[2] / "models" / "data" / "cdi_schema.json"
KUBERNETES_VERSION = "1.31"  # kubernetes-validate >= 1.31 ships this version's schemas
GPU_RESOURCE = "nvidia.com/gpu"
MIG_PREFIX = "nvidia.com/mig-"
RDMA_RESOURCE = "rdma/rdma_shared_device_a"
DEFAULT_SHM_BYTES = 64 * 2**20  # what containerd, CRI-O and Docker give /dev/shm without a volume

# ---------------------------------------------------------------------------------------------
# CDI
# ---------------------------------------------------------------------------------------------


@cache
def cdi_validator():
    import jsonschema

    schema = json.loads(CDI_SCHEMA.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def cdi_schema_problems(spec: object, where: str) -> list[str]:
    """Every way `spec` breaks the CDI schema, each with its JSON path; [] when it validates."""
    problems = []
    for error in sorted(cdi_validator().iter_errors(spec), key=lambda e: list(map(str, e.absolute_path))):
        path = "$" + "".join(f"[{p!r}]" if isinstance(p, str) else f"[{p}]" for p in error.absolute_path)
        problems.append(f"{where}: at {path}: {error.message}")
    try:
        if json.loads(json.dumps(spec)) != spec:
            problems.append(f"{where}: the spec does not survive json.dumps / json.loads unchanged (tuples?)")
    except (TypeError, ValueError) as error:
        problems.append(f"{where}: the spec is not JSON: {error}")
    return problems


def device_names(spec: dict) -> list[str]:
    return [d.get("name") for d in spec.get("devices") or [] if isinstance(d, dict)]


def device(spec: dict, name: str) -> dict | None:
    found = [d for d in spec.get("devices") or [] if isinstance(d, dict) and d.get("name") == name]
    return found[0] if len(found) == 1 else None


def node_paths(edits: object) -> list[str]:
    """The container paths of the device nodes of a containerEdits."""
    nodes = edits.get("deviceNodes") if isinstance(edits, dict) else None
    return [n.get("path") for n in nodes or [] if isinstance(n, dict)]


def expected_devices(node: dict) -> list[tuple[str, list[str]]]:
    """(name, device node paths) of every device, in the docstring's order: whole GPUs by index
    (index name, then UUID), then MIG devices by (GPU index, MIG index), then "all"."""
    gpus = sorted(node["gpus"], key=lambda g: g["index"])
    out = []
    for gpu in gpus:
        if gpu.get("mig") is None:
            paths = [f"/dev/nvidia{gpu['minor']}"]
            out += [(str(gpu["index"]), paths), (gpu["uuid"], paths)]
    for gpu in gpus:
        for mig in sorted(gpu.get("mig") or [], key=lambda m: m["index"]):
            paths = [
                f"/dev/nvidia{gpu['minor']}",
                f"/dev/nvidia-caps/nvidia-cap{mig['gi_cap_minor']}",
                f"/dev/nvidia-caps/nvidia-cap{mig['ci_cap_minor']}",
            ]
            out += [(f"{gpu['index']}:{mig['index']}", paths), (mig["uuid"], paths)]
    every: list[str] = []
    for _, paths in out:
        every += [p for p in paths if p not in every]
    return [*out, ("all", every)]


# ---------------------------------------------------------------------------------------------
# Pods: the schemas
# ---------------------------------------------------------------------------------------------


def pod_schema_problems(pod: object, where: str) -> list[str]:
    """The official client's V1Pod refuses `pod` or does not give it back unchanged."""
    if not isinstance(pod, dict):
        return [f"{where}: expected a dict, got {type(pod).__name__}"]
    if (pod.get("apiVersion"), pod.get("kind")) != ("v1", "Pod"):
        return [
            f"{where}: apiVersion and kind are {pod.get('apiVersion')!r}, {pod.get('kind')!r}; expected 'v1', 'Pod'"
        ]
    from kubernetes import client

    try:
        model = load_model(pod, "V1Pod")
    except Exception as error:  # a wrong type, a missing required field
        return [f"{where}: the Kubernetes client's V1Pod refuses it: {type(error).__name__}: {error}"[:600]]
    back = client.ApiClient().sanitize_for_serialization(model)
    return [f"{where}: {problem}" for problem in differences(pod, back)]


def openapi_problems(pod: object, where: str) -> list[str]:
    """kubernetes_validate's strict validation (Kubernetes' OpenAPI schema, unknown fields refused)."""
    import kubernetes_validate

    try:
        kubernetes_validate.validate(pod, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as error:
        path = ".".join(str(p) for p in error.absolute_path) or "the top level"
        return [f"{where}: Kubernetes {KUBERNETES_VERSION}'s OpenAPI schema refuses it at {path}: {error.message}"]
    except Exception as error:  # not a dict, no kind: the validator's own complaints
        return [f"{where}: kubernetes_validate cannot check it: {type(error).__name__}: {error}"]
    return []


# ---------------------------------------------------------------------------------------------
# Pods: what the scheduler and the kubelet do with them
# ---------------------------------------------------------------------------------------------


def containers(pod: dict) -> list[dict]:
    return [c for c in dig(pod, "spec.containers") or [] if isinstance(c, dict)]


def tolerates(pod: dict, taint: dict) -> bool:
    """Whether one of the pod's tolerations matches `taint` ({key, value, effect}), by Kubernetes'
    rules: an empty key with Exists matches every key; an empty effect every effect; Exists
    ignores the value, Equal (the default operator) compares it."""
    for toleration in dig(pod, "spec.tolerations") or []:
        if not isinstance(toleration, dict):
            continue
        operator = toleration.get("operator") or "Equal"
        key = toleration.get("key") or ""
        if key and key != taint["key"]:
            continue
        if not key and operator != "Exists":
            continue
        if toleration.get("effect") and toleration["effect"] != taint["effect"]:
            continue
        if operator == "Exists" or (toleration.get("value") or "") == taint.get("value", ""):
            return True
    return False


def _expression_matches(expression: dict, labels: dict[str, str]) -> bool:
    key, operator, values = expression.get("key"), expression.get("operator"), expression.get("values") or []
    if operator == "In":
        return key in labels and labels[key] in values
    if operator == "NotIn":
        return key not in labels or labels[key] not in values
    if operator == "Exists":
        return key in labels
    if operator == "DoesNotExist":
        return key not in labels
    if operator in ("Gt", "Lt") and key in labels and len(values) == 1:
        try:
            have, bound = int(labels[key]), int(values[0])
        except ValueError:
            return False
        return have > bound if operator == "Gt" else have < bound
    return False


def admits(pod: dict, labels: dict[str, str]) -> bool:
    """Whether a node with `labels` passes the pod's nodeSelector and required node affinity
    (nodeSelectorTerms ORed, the expressions of a term ANDed; a term with no expression matches
    nothing)."""
    selector = dig(pod, "spec.nodeSelector") or {}
    if any(labels.get(k) != v for k, v in selector.items()):
        return False
    required = dig(pod, "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution")
    if required is None:
        return True
    terms = [t for t in required.get("nodeSelectorTerms") or [] if isinstance(t, dict)]
    return any(
        (t.get("matchExpressions") or t.get("matchFields"))
        and all(_expression_matches(e, labels) for e in t.get("matchExpressions") or [])
        and not t.get("matchFields")
        for t in terms
    )


def extended_resources(pod: dict, prefixes: tuple[str, ...] = ("nvidia.com/", "rdma/")) -> dict[str, dict[str, Any]]:
    """{resource: {"limits": q, "requests": q}} of the pod's containers, for resources under `prefixes`."""
    out: dict[str, dict[str, Any]] = {}
    for container in containers(pod):
        for where in ("limits", "requests"):
            for name, quantity in ((container.get("resources") or {}).get(where) or {}).items():
                if name.startswith(prefixes):
                    out.setdefault(name, {})[where] = quantity
    return out


def extended_resource_problems(pod: dict) -> list[str]:
    """The API server's rule for extended resources (nvidia.com/gpu, MIG devices, RDMA devices),
    which the OpenAPI schema does not express: they cannot be overcommitted, so a container
    must set a limit, and a request, if set, must equal it."""
    problems = []
    for name, where in extended_resources(pod).items():
        if "limits" not in where:
            problems.append(
                f"{name} is in resources.requests ({where['requests']!r}) but not in resources.limits: Kubernetes "
                f"refuses such a pod (an extended resource such as {name} cannot be overcommitted, so it must have a "
                "limit, and a request only equal to it); the device plugin allocates what the limit says"
            )
        elif "requests" in where and str(where["requests"]) != str(where["limits"]):
            problems.append(
                f"{name}: resources.requests {where['requests']!r} differs from resources.limits "
                f"{where['limits']!r}; extended resources must have requests equal to limits"
            )
    return problems


def shm_problems(pod: dict, size: str) -> list[str]:
    """Whether every container sees a memory-backed /dev/shm of sizeLimit `size`."""
    volumes = {v.get("name"): v for v in dig(pod, "spec.volumes") or [] if isinstance(v, dict)}
    problems = []
    why = (
        "without a memory-backed volume there, the container runtime gives /dev/shm 64 MiB, and NCCL's shared-memory "
        "transport and PyTorch DataLoader workers fail with 'Bus error' or 'unhandled system error' once they need more"
    )
    for container in containers(pod):
        mounts = [m for m in container.get("volumeMounts") or [] if isinstance(m, dict)]
        at_shm = [m for m in mounts if (m.get("mountPath") or "").rstrip("/") == "/dev/shm"]
        if not at_shm:
            problems.append(f"container {container.get('name')!r} mounts no volume at /dev/shm: {why}")
            continue
        volume = volumes.get(at_shm[0].get("name"))
        if volume is None:
            problems.append(f"/dev/shm mounts volume {at_shm[0].get('name')!r}, which spec.volumes does not define")
            continue
        empty_dir = volume.get("emptyDir")
        if not isinstance(empty_dir, dict) or empty_dir.get("medium") != "Memory":
            problems.append(
                f"the volume at /dev/shm ({volume.get('name')!r}) is not an emptyDir with medium 'Memory' "
                f"(got { ({k: v for k, v in volume.items() if k != 'name'})!r}): /dev/shm must be RAM (tmpfs); {why}"
            )
        elif empty_dir.get("sizeLimit") != size:
            problems.append(
                f"the /dev/shm emptyDir has sizeLimit {empty_dir.get('sizeLimit')!r}, expected shm_size {size!r}"
            )
        if at_shm[0].get("readOnly"):
            problems.append("/dev/shm is mounted read-only: nothing could create shared memory there")
    if not containers(pod):
        problems.append("the pod has no container")
    return problems


def env_of(container: dict) -> dict[str, Any]:
    """name -> value of the container's env list (valueFrom entries as their dict)."""
    return {
        e.get("name"): e.get("value", e.get("valueFrom"))
        for e in container.get("env") or []
        if isinstance(e, dict) and isinstance(e.get("name"), str)
    }


def capabilities_added(container: dict) -> list[str]:
    return list(dig(container, "securityContext.capabilities.add") or [])
