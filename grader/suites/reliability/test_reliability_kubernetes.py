"""Hidden suite: torchrun_job's manifests against the official Kubernetes Python client's models
(the docstring's schema reference: every field must load and come back unchanged), against what
Kubernetes does with them (an Indexed Job's completion index and pod hostnames, a headless
Service's pod DNS names, the NVIDIA device plugin's `nvidia.com/gpu`), against torchrun's own
argument parser, and for real: the pods of a 2-node Job run as local torchrun processes that must
form one c10d world and finish an all-reduce (k8s_reference.run_local_world).
"""

from __future__ import annotations

import random

import pytest

from grader.sandbox import Step
from grader.suites.reliability import k8s_reference as k8s
from grader.testing import RUN_SEED, expect_exception

_rng = random.Random(RUN_SEED)  # a port and a name that differ between runs: no hard-coded manifest
PORT = _rng.randrange(20000, 40000)
TAG = f"r{_rng.randrange(10**6)}"
WHERE = "(see torchrun_job's docstring"

CASES = [
    # every default: 4 nodes of 8 GPUs in "default", port 29500, 3 restarts
    dict(name="llama-pretrain", image="nvcr.io/nvidia/pytorch:25.01-py3", nodes=4, gpus_per_node=8,
         command=["/workspace/train.py", "--steps=100"]),
    # one node, no restarts, another namespace, the highest port
    dict(name="solo", image="pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime", nodes=1, gpus_per_node=1,
         command=["train.py"], max_restarts=0, port=65535, namespace="research"),
    # 12 nodes (two-digit indices), a port and a name that change every run
    dict(name=f"moe-{TAG}", image="registry.example.com/team/moe:v3", nodes=12, gpus_per_node=4,
         command=["/app/moe.py", "--experts", "64", "--config=/etc/moe.yaml"], max_restarts=5, port=PORT,
         namespace="team-7"),
    # CPU only: no GPU resource, one worker per pod; the lowest port
    dict(name="cpu-smoke", image="python:3.12-slim", nodes=3, gpus_per_node=0, command=["smoke.py", "-v"],
         max_restarts=1, port=1, namespace="ci"),
    # the longest name whose last hostname, <name>-1, is still a 63-character DNS label
    dict(name="a" + "b" * 60, image="img", nodes=2, gpus_per_node=2, command=["t.py"]),
]  # fmt: skip
DEFAULTS = dict(max_restarts=3, port=29500, namespace="default")


def _full(case: dict) -> dict:
    return {**DEFAULTS, **case}


def _describe(case: dict) -> str:
    c = _full(case)
    return (
        f"torchrun_job(name={c['name']!r}, nodes={c['nodes']}, gpus_per_node={c['gpus_per_node']}, "
        f"max_restarts={c['max_restarts']}, port={c['port']}, namespace={c['namespace']!r})"
    )


def _all_manifests(submission) -> list[tuple[dict, list]]:
    """(case, returned manifests) for every case, in one worker call."""
    got = submission.script([Step("torchrun_job", kwargs=case) for case in CASES]).steps[0]
    return list(zip(CASES, got))


def _service_and_job(manifests) -> tuple[dict, dict]:
    return k8s.by_kind(manifests, "Service"), k8s.by_kind(manifests, "Job")


def _report(problems: list[str], section: str) -> None:
    shown = "\n  ".join(problems[:6])
    more = f"\n  ... and {len(problems) - 6} more" if len(problems) > 6 else ""
    assert not problems, f"{len(problems)} problem(s) {WHERE}, {section}):\n  {shown}{more}"


@pytest.mark.points(1)
def test_returns_a_service_then_a_job_named_after_the_job_in_its_namespace(submission):
    problems = []
    for case, manifests in _all_manifests(submission):
        c = _full(case)
        kinds = [(m.get("apiVersion"), m.get("kind")) if isinstance(m, dict) else type(m).__name__ for m in manifests]
        if kinds != [("v1", "Service"), ("batch/v1", "Job")]:
            problems.append(f"{_describe(case)}: expected [(v1, Service), (batch/v1, Job)], got {kinds}")
            continue
        for manifest in manifests:
            meta = manifest.get("metadata") or {}
            got = (meta.get("name"), meta.get("namespace"))
            if got != (c["name"], c["namespace"]):
                problems.append(
                    f"{_describe(case)}: the {manifest['kind']}'s metadata (name, namespace) is {got}, "
                    f"expected {(c['name'], c['namespace'])}"
                )
    _report(problems, "first paragraph and 'metadata'")


@pytest.mark.points(4)
def test_every_manifest_loads_with_the_official_kubernetes_client_unchanged(submission):
    """V1Service.from_dict and V1Job.from_dict (kubernetes 37: pydantic models that refuse a
    wrong type or a missing required field), then written back: nothing may be dropped (a
    misspelled or snake_case field) or changed (an int where the schema has a string)."""
    problems = []
    for case, manifests in _all_manifests(submission):
        if not isinstance(manifests, list):
            problems.append(f"{_describe(case)}: expected a list of dicts, got {type(manifests).__name__}")
            continue
        for i, manifest in enumerate(manifests):
            kind = manifest.get("kind", f"manifest {i}") if isinstance(manifest, dict) else f"manifest {i}"
            problems += k8s.schema_problems(manifest, f"{_describe(case)}, {kind}")
    _report(problems, "the schema reference is the official client: kubernetes.client.V1Service / V1Job")


@pytest.mark.points(2)
def test_the_job_is_indexed_with_one_pod_per_node_all_at_once(submission):
    problems = []
    for case, manifests in _all_manifests(submission):
        _, job = _service_and_job(manifests)
        spec = job.get("spec") or {}
        got = {key: spec.get(key) for key in ("completionMode", "completions", "parallelism")}
        want = {"completionMode": "Indexed", "completions": case["nodes"], "parallelism": case["nodes"]}
        if got != want:
            problems.append(f"{_describe(case)}: job.spec has {got}, expected {want}")
    _report(problems, "'job: spec.completionMode ...'")


@pytest.mark.points(2)
def test_the_service_is_headless_and_selects_the_pods_of_the_job(submission):
    problems = []
    for case, manifests in _all_manifests(submission):
        c = _full(case)
        service, job = _service_and_job(manifests)
        spec = service.get("spec") or {}
        if spec.get("clusterIP") != "None":
            problems.append(f"{_describe(case)}: service.spec.clusterIP is {spec.get('clusterIP')!r}, expected 'None'")
        selector, labels = spec.get("selector"), k8s.pod_labels(job)
        if not isinstance(selector, dict) or not selector:
            problems.append(
                f"{_describe(case)}: service.spec.selector is {selector!r}, expected the Job's pods' labels"
            )
        elif any(labels.get(key) != value for key, value in selector.items()):
            problems.append(
                f"{_describe(case)}: service.spec.selector {selector} does not match every pod of the Job, whose "
                f"labels are {labels} (the template's and those the Job controller adds)"
            )
        ports = [p.get("port") for p in spec.get("ports") or [] if isinstance(p, dict)]
        if c["port"] not in ports:
            problems.append(f"{_describe(case)}: service.spec.ports has ports {ports}, expected one of {c['port']}")
    _report(problems, "'service: ...')")


@pytest.mark.points(2)
def test_pods_get_stable_dns_names_through_the_services_subdomain(submission):
    problems = []
    for case, manifests in _all_manifests(submission):
        service, job = _service_and_job(manifests)
        subdomain = k8s.dig(job, "spec.template.spec.subdomain")
        if subdomain != case["name"] or k8s.dig(service, "metadata.name") != case["name"]:
            problems.append(
                f"{_describe(case)}: job.spec.template.spec.subdomain is {subdomain!r} and the Service is named "
                f"{k8s.dig(service, 'metadata.name')!r}; both must be {case['name']!r}, so that pod i is "
                f"{case['name']}-i.{case['name']}.<namespace>.svc.cluster.local"
            )
    _report(problems, "'subdomain = name')")


@pytest.mark.points(3)
def test_every_pod_rendezvouses_at_pod_zeros_dns_name_on_the_port(submission):
    problems = []
    for case, manifests in _all_manifests(submission):
        c = _full(case)
        _, job = _service_and_job(manifests)
        want = f"{c['name']}-0.{c['name']}.{c['namespace']}.svc.cluster.local:{c['port']}"
        for index in range(case["nodes"]):
            args = k8s.parse_torchrun(k8s.pod_argv(job, index))
            if args.rdzv_backend != "c10d" or args.rdzv_endpoint != want:
                problems.append(
                    f"{_describe(case)}, pod {index}: --rdzv-backend={args.rdzv_backend} "
                    f"--rdzv-endpoint={args.rdzv_endpoint!r}, expected c10d at {want!r} (pod 0's DNS name)"
                )
                break  # the first pod that is wrong is enough
    _report(problems, "H, pod 0's DNS name, and the torchrun command")


@pytest.mark.points(3)
def test_each_pod_runs_one_worker_per_gpu_it_is_given(submission):
    """nvidia.com/gpu in limits as the string str(gpus_per_node), --nproc-per-node the same;
    a CPU-only job (0 GPUs) asks for no GPU and runs one worker per pod."""
    problems = []
    for case, manifests in _all_manifests(submission):
        _, job = _service_and_job(manifests)
        gpus = case["gpus_per_node"]
        limit, request = k8s.gpu_quantity(job, "limits"), k8s.gpu_quantity(job, "requests")
        if gpus > 0 and str(limit) != str(gpus):
            problems.append(
                f"{_describe(case)}: resources.limits['nvidia.com/gpu'] is {limit!r}, expected {str(gpus)!r}"
            )
        if gpus > 0 and request is not None and str(request) != str(gpus):
            problems.append(
                f"{_describe(case)}: resources.requests['nvidia.com/gpu'] is {request!r}, must equal the limit"
            )
        if gpus == 0 and (limit is not None or request is not None):
            problems.append(f"{_describe(case)}: a CPU-only job asks for nvidia.com/gpu ({limit!r}, {request!r})")
        nproc = str(k8s.parse_torchrun(k8s.pod_argv(job, 0)).nproc_per_node)
        if nproc != str(gpus or 1):
            problems.append(f"{_describe(case)}: --nproc-per-node={nproc}, expected {gpus or 1}")
    _report(problems, "P and resources.limits")


@pytest.mark.points(3)
def test_the_container_runs_torchrun_with_exactly_the_docstrings_options_then_the_command(submission):
    """Read with torchrun's own parser after Kubernetes' $(VAR) expansion in each pod."""
    problems = []
    for case, manifests in _all_manifests(submission):
        c = _full(case)
        _, job = _service_and_job(manifests)
        container = k8s.the_container(job)
        if container.get("image") != c["image"]:
            problems.append(
                f"{_describe(case)}: the container's image is {container.get('image')!r}, not {c['image']!r}"
            )
        if container.get("args"):
            problems.append(f"{_describe(case)}: the container sets args {container['args']!r}; the docstring has none")
        for index in range(case["nodes"]):
            found = [
                f"{_describe(case)}: {p}"
                for p in k8s.torchrun_problems(
                    job,
                    index,
                    nodes=c["nodes"],
                    nproc=c["gpus_per_node"] or 1,
                    endpoint=f"{c['name']}-0.{c['name']}.{c['namespace']}.svc.cluster.local:{c['port']}",
                    rdzv_id=c["name"],
                    max_restarts=c["max_restarts"],
                    command=c["command"],
                )
            ]
            problems += found
            if found:
                break  # the first pod that is wrong is enough
    _report(problems, "the container's `command`")


@pytest.mark.points(2)
def test_failures_are_retried_max_restarts_times_by_torchrun_and_by_the_job(submission):
    problems = []
    for case, manifests in _all_manifests(submission):
        c = _full(case)
        _, job = _service_and_job(manifests)
        backoff = k8s.dig(job, "spec.backoffLimit")
        policy = k8s.dig(job, "spec.template.spec.restartPolicy")
        restarts = k8s.parse_torchrun(k8s.pod_argv(job, 0)).max_restarts
        got = (restarts, backoff, policy)
        want = (c["max_restarts"], c["max_restarts"], "Never")
        if got != want:
            problems.append(
                f"{_describe(case)}: (--max-restarts, backoffLimit, restartPolicy) = {got}, expected {want}"
            )
    _report(problems, "spec.backoffLimit and restartPolicy")


@pytest.mark.points(4)
def test_the_pods_of_a_two_node_job_form_one_torchrun_world_and_finish_a_step(submission):
    """Each pod of the Job runs as local torchrun (k8s_reference.run_local_world: pod 0's DNS
    name is 127.0.0.1, one worker per pod, the grader's one-step all-reduce as the script)."""
    command = ["/workspace/allreduce_step.py", "--steps=1"]
    manifests = submission.function("torchrun_job")(f"local-{TAG}", "img", 2, 8, command, 1, PORT, "grading")
    world = k8s.run_local_world(manifests, command, timeout_s=90)
    logs = "".join(f"\n--- pod {i} (last lines) ---\n{text[-1200:]}" for i, text in world.logs.items())
    assert world.ok, f"{world.message} after {world.seconds:.1f} s {WHERE}: the whole manifest).{logs}"


def _name_of(length: int) -> str:
    return "n" * length


BAD = [
    (dict(name="Train"), "a name with an uppercase letter"),
    (dict(name="7b-run"), "a name starting with a digit"),
    (dict(name="train_run"), "a name with an underscore"),
    (dict(name="train-"), "a name ending with '-'"),
    (dict(name=""), "an empty name"),
    (dict(name=_name_of(62), nodes=2), "a name whose pod hostname <name>-1 has 64 characters"),
    (dict(name=_name_of(61), nodes=100), "a name whose pod hostname <name>-99 has 64 characters"),
    (dict(namespace="Prod"), "an uppercase namespace"),
    (dict(namespace="team_a"), "a namespace with an underscore"),
    (dict(namespace=_name_of(64)), "a namespace of 64 characters"),
    (dict(image=""), "an empty image"),
    (dict(nodes=0), "nodes = 0"),
    (dict(nodes=2.0), "nodes not an integer"),
    (dict(nodes=True), "nodes a bool"),
    (dict(gpus_per_node=-1), "gpus_per_node < 0"),
    (dict(command=[]), "an empty command"),
    (dict(command="train.py"), "a command that is a string, not a list"),
    (dict(command=["train.py", 3]), "a command with a non-string"),
    (dict(max_restarts=-1), "max_restarts < 0"),
    (dict(port=0), "port 0"),
    (dict(port=65536), "port 65536"),
    (dict(port="29500"), "port a string"),
]
GOOD = dict(name="job", image="img", nodes=2, gpus_per_node=8, command=["train.py"])


@pytest.mark.points(1)
def test_names_and_namespaces_of_exactly_63_characters_are_accepted(submission):
    """The longest legal labels: a namespace of 63 characters, and a name whose last pod's
    hostname, <name>-<nodes - 1>, has exactly 63."""
    namespace, name = _name_of(63), _name_of(61)
    _, job = submission.function("torchrun_job")(**{**GOOD, "name": name, "namespace": namespace, "nodes": 2})
    # Read as torchrun reads it (any spelling its parser takes: --rdzv_endpoint H:P as well).
    argv = k8s.pod_argv(job, 0)
    endpoint = f"{name}-0.{name}.{namespace}.svc.cluster.local:29500"
    got = k8s.parse_torchrun(argv).rdzv_endpoint
    assert got == endpoint, (
        f"63-character labels are legal; expected torchrun's rendezvous endpoint {endpoint!r}, got {got!r} "
        f"(command {argv!r})"
    )


@pytest.mark.points(0.2)
@pytest.mark.parametrize(("change", "why"), BAD, ids=[why for _, why in BAD])
def test_bad_job_arguments_raise_value_error(submission, change, why):
    expect_exception("ValueError", lambda: submission.function("torchrun_job")(**{**GOOD, **change}))
