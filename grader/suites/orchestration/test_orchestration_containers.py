"""Hidden suite: cdi_spec against a JSON schema of the CDI specification (v0.7.0, written for the
course: grader/models/data/cdi_schema.json) and against what a container runtime does with the
spec (which device nodes, mounts, hooks and environment a container asking for a device gets),
on nodes built by grader.models.gpu_node (out-of-order GPU lists, minors that are not indices,
MIG on some GPUs, GPUs that cannot do MIG); training_pod against the official Kubernetes
client's V1Pod, Kubernetes' own OpenAPI schema (kubernetes_validate, strict), and what the
scheduler and the kubelet do with the pod (taints tolerated, nodes admitted, extended resources,
/dev/shm); and every refusal.
"""

from __future__ import annotations

import copy
import random

import pytest

from grader.models.gpu_node import gpu_node
from grader.sandbox import Step
from grader.suites.orchestration import containers_reference as ref
from grader.testing import RUN_SEED, expect_exception

_rng = random.Random(RUN_SEED)  # names, seeds and sizes that differ between runs: nothing hard-coded
TAG = f"r{_rng.randrange(10**6)}"
SEED = _rng.randrange(10**6)
CDI_WHERE = "(see cdi_spec's docstring"
POD_WHERE = "(see training_pod's docstring"


def _shuffled(node: dict, seed: int) -> dict:
    """The same node with its GPUs listed out of index order (as no rule says they come sorted)."""
    node = copy.deepcopy(node)
    random.Random(seed).shuffle(node["gpus"])
    return node


def _two_folders(node: dict) -> dict:
    """Libraries in two folders, interleaved: the hook lists each folder once, in first-seen order."""
    node = copy.deepcopy(node)
    libs = node["libraries"]
    node["libraries"] = [
        lib if i % 2 == 0 else lib.replace("/usr/lib/x86_64-linux-gnu/", "/usr/lib64/") for i, lib in enumerate(libs)
    ]
    return node


NODES = [
    # an HGX H100: 8 GPUs, MIG off everywhere
    ("8 H100, no MIG", gpu_node(8, seed=SEED)),
    # GPU 7 split in two MIG devices, GPU 5 in MIG mode with none; minors not equal to indices;
    # the GPU list out of order
    ("8 H100, GPU 7 with 2 MIG devices, GPU 5 in MIG mode with none, minors permuted, listed out of order",
     _shuffled(gpu_node(8, mig={7: ["3g.40gb", "3g.40gb"], 5: []}, seed=SEED + 1, minors=[1, 0, 2, 3, 5, 4, 6, 7]),
               SEED)),
    # GPUs that cannot do MIG, libraries in two folders, another driver version
    ("3 L40S, libraries in two folders, driver 535.183.01",
     _two_folders(gpu_node(3, product="NVIDIA-L40S", mig_capable=False, seed=SEED + 2, driver_version="535.183.01"))),
    # one GPU, all MIG: seven 1g.10gb devices (MIG indices listed out of order too)
    ("1 H100 with 7 MIG devices listed out of order",
     gpu_node(1, mig={0: ["1g.10gb"] * 7}, seed=SEED + 3)),
    # MIG on two GPUs of four, the others whole; GPU minors start at 4
    ("4 A100, MIG on GPUs 1 and 3, minors 4..7",
     gpu_node(4, product="NVIDIA-A100-SXM4-80GB", mig={1: ["2g.20gb", "4g.40gb"], 3: ["7g.80gb"]}, seed=SEED + 4,
              minors=[4, 5, 6, 7])),
]  # fmt: skip
NODES[3][1]["gpus"][0]["mig"].reverse()


def _all_specs(submission) -> list[tuple[str, dict, dict]]:
    """(description, node, returned spec) for every node, in one worker call."""
    got = submission.script([Step("cdi_spec", args=(node,)) for _, node in NODES]).steps[0]
    return [(why, node, spec) for (why, node), spec in zip(NODES, got)]


def _report(problems: list[str], where: str, section: str) -> None:
    shown = "\n  ".join(problems[:6])
    more = f"\n  ... and {len(problems) - 6} more" if len(problems) > 6 else ""
    assert not problems, f"{len(problems)} problem(s) {where}, {section}):\n  {shown}{more}"


# ---------------------------------------------------------------------------------------------
# cdi_spec
# ---------------------------------------------------------------------------------------------


@pytest.mark.points(3)
def test_cdi_spec_validates_against_the_cdi_v0_7_schema(submission):
    """jsonschema against grader/models/data/cdi_schema.json: required fields, no unknown field,
    device names and kind as the spec allows them, absolute paths, a device with some edit; and
    the spec survives a JSON round trip (what nvidia-ctk writes is a JSON file)."""
    problems = []
    for why, _, spec in _all_specs(submission):
        problems += ref.cdi_schema_problems(spec, why)
    _report(problems, CDI_WHERE, "the schema is the CDI specification v0.7.0")


@pytest.mark.points(1)
def test_cdi_spec_declares_the_nvidia_gpu_kind_at_cdi_version_0_5_0(submission):
    problems = []
    for why, _, spec in _all_specs(submission):
        got = (spec.get("cdiVersion"), spec.get("kind")) if isinstance(spec, dict) else spec
        if got != ("0.5.0", "nvidia.com/gpu"):
            problems.append(f"{why}: (cdiVersion, kind) = {got!r}, expected ('0.5.0', 'nvidia.com/gpu')")
    _report(problems, CDI_WHERE, "CDI_VERSION and CDI_KIND")


@pytest.mark.points(3)
def test_cdi_devices_are_whole_gpus_by_index_then_mig_devices_then_all(submission):
    """The names in the docstring's order: whole GPUs by increasing index whatever the order of
    node['gpus'] (index name, then UUID), MIG devices by GPU index then MIG index ("7:0" then
    its MIG- UUID), then "all"."""
    problems = []
    for why, node, spec in _all_specs(submission):
        want = [name for name, _ in ref.expected_devices(node)]
        got = ref.device_names(spec)
        if got != want:
            problems.append(f"{why}: device names {got}, expected {want}")
    _report(problems, CDI_WHERE, "items 1 to 3")


@pytest.mark.points(2)
def test_each_gpu_device_opens_the_device_node_of_its_minor_not_of_its_index(submission):
    """A container given nvidia.com/gpu=<index> or =<uuid> gets /dev/nvidia<minor> and no other
    GPU's node (minors differ from indices on two of the nodes)."""
    problems = []
    for why, node, spec in _all_specs(submission):
        for gpu in node["gpus"]:
            if gpu["mig"] is not None:
                continue
            for name in (str(gpu["index"]), gpu["uuid"]):
                entry = ref.device(spec, name)
                got = ref.node_paths((entry or {}).get("containerEdits"))
                if got != [f"/dev/nvidia{gpu['minor']}"]:
                    problems.append(
                        f"{why}: device {name!r} (GPU index {gpu['index']}, minor {gpu['minor']}) has deviceNodes "
                        f"{got if entry else 'no such device (or two)'}, expected [/dev/nvidia{gpu['minor']}]"
                    )
    _report(problems, CDI_WHERE, "item 1: /dev/nvidia<minor>")


@pytest.mark.points(3)
def test_mig_devices_open_their_gpu_and_their_two_capability_nodes(submission):
    """A MIG device "<gpu index>:<mig index>" and its MIG- UUID: /dev/nvidia<GPU minor>, then the
    GPU instance's and the compute instance's /dev/nvidia-caps/nvidia-cap<minor>."""
    problems = []
    for why, node, spec in _all_specs(submission):
        for gpu in node["gpus"]:
            for mig in gpu["mig"] or []:
                want = [
                    f"/dev/nvidia{gpu['minor']}",
                    f"/dev/nvidia-caps/nvidia-cap{mig['gi_cap_minor']}",
                    f"/dev/nvidia-caps/nvidia-cap{mig['ci_cap_minor']}",
                ]
                for name in (f"{gpu['index']}:{mig['index']}", mig["uuid"]):
                    entry = ref.device(spec, name)
                    got = ref.node_paths((entry or {}).get("containerEdits"))
                    if got != want:
                        problems.append(
                            f"{why}: MIG device {name!r} has deviceNodes "
                            f"{got if entry else 'no such device (or two)'}, expected {want}"
                        )
    _report(problems, CDI_WHERE, "item 2")


@pytest.mark.points(2)
def test_a_gpu_in_mig_mode_is_given_only_as_its_mig_devices(submission):
    """No device named after a MIG-mode GPU's index or UUID (with MIG devices or with none), and
    no device of any kind on a node for a GPU whose MIG devices are []."""
    problems = []
    for why, node, spec in _all_specs(submission):
        names = ref.device_names(spec)
        for gpu in node["gpus"]:
            if gpu["mig"] is None:
                continue
            whole = [n for n in (str(gpu["index"]), gpu["uuid"]) if n in names]
            if whole:
                problems.append(
                    f"{why}: GPU {gpu['index']} is in MIG mode, but the spec has whole-GPU device(s) {whole}: "
                    "a GPU in MIG mode can be given only as its MIG devices"
                )
            if not gpu["mig"]:
                prefix = f"{gpu['index']}:"
                stray = [n for n in names if n.startswith(prefix)]
                if stray:
                    problems.append(f"{why}: GPU {gpu['index']} has no MIG device, yet the spec has {stray}")
    _report(problems, CDI_WHERE, "item 2: 'A GPU in MIG mode has no device of its own'")


@pytest.mark.points(2)
def test_the_all_device_opens_every_device_node_once_in_first_appearance_order(submission):
    problems = []
    for why, node, spec in _all_specs(submission):
        want = ref.expected_devices(node)[-1][1]
        entry = ref.device(spec, "all")
        got = ref.node_paths((entry or {}).get("containerEdits"))
        if got != want:
            problems.append(
                f"{why}: device 'all' has deviceNodes {got if entry else 'no such device (or two)'}, expected {want} "
                "(each node once: the MIG devices of a GPU share its /dev/nvidia<minor>)"
            )
    _report(problems, CDI_WHERE, "item 3")


@pytest.mark.points(1)
def test_every_gpu_and_mig_device_can_be_asked_for_by_exactly_one_index_name_and_one_uuid(submission):
    """Invariants a runtime relies on: names unique; every device's UUID named once; the number of
    devices 2 x (whole GPUs + MIG devices) + 1."""
    problems = []
    for why, node, spec in _all_specs(submission):
        names = ref.device_names(spec)
        twice = sorted({n for n in names if names.count(n) > 1}, key=str)
        if twice:
            problems.append(f"{why}: device names {twice} appear more than once (a runtime cannot tell them apart)")
        uuids = [g["uuid"] for g in node["gpus"] if g["mig"] is None]
        uuids += [m["uuid"] for g in node["gpus"] for m in g["mig"] or []]
        missing = [u for u in uuids if u not in names]
        if missing:
            problems.append(f"{why}: no device is named after UUID(s) {missing}")
        if len(names) != 2 * len(uuids) + 1:
            problems.append(
                f"{why}: {len(names)} devices, expected {2 * len(uuids) + 1} (an index name and a UUID for each of the "
                f"{len(uuids)} whole GPUs and MIG devices, and 'all')"
            )
    _report(problems, CDI_WHERE, "items 1 to 3")


@pytest.mark.points(3)
def test_the_common_edits_give_control_nodes_driver_libraries_an_ldcache_hook_and_a_void_env(submission):
    """What a container given any one device gets from the spec's own containerEdits: the four
    control nodes in order, each library bind-mounted read-only at its own path in the node's
    order, one createContainer hook running update-ldcache on each library folder once (two
    folders on one node), NVIDIA_VISIBLE_DEVICES=void, and nothing else."""
    problems = []
    for why, node, spec in _all_specs(submission):
        common = spec.get("containerEdits") if isinstance(spec, dict) else None
        if not isinstance(common, dict):
            problems.append(f"{why}: the spec has no containerEdits of its own (got {common!r})")
            continue
        folders = list(dict.fromkeys(lib.rsplit("/", 1)[0] for lib in node["libraries"]))
        args = ["nvidia-cdi-hook", "update-ldcache"] + [w for folder in folders for w in ("--folder", folder)]
        want = {
            "env": ["NVIDIA_VISIBLE_DEVICES=void"],
            "deviceNodes": [
                {"path": p}
                for p in ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset")
            ],
            "mounts": [
                {"hostPath": lib, "containerPath": lib, "options": ["ro", "nosuid", "nodev", "bind"]}
                for lib in node["libraries"]
            ],
            "hooks": [{"hookName": "createContainer", "path": "/usr/bin/nvidia-cdi-hook", "args": args}],
        }
        for key in sorted(set(want) | set(common)):
            if common.get(key) != want.get(key):
                problems.append(f"{why}: containerEdits[{key!r}] is {common.get(key)!r}, expected {want.get(key)!r}")
    _report(problems, CDI_WHERE, "the spec's own 'containerEdits'")


@pytest.mark.points(1)
def test_the_spec_its_devices_and_their_device_nodes_hold_no_other_key(submission):
    """The docstring's shapes exactly: the spec's four keys, each device {name, containerEdits},
    each device's edits {deviceNodes}, each device node {path} (the schema would take more, such
    as annotations or a node's type and major; the docstring says nothing else)."""
    problems = []
    for why, _, spec in _all_specs(submission):
        keys = sorted(spec) if isinstance(spec, dict) else spec
        if keys != ["cdiVersion", "containerEdits", "devices", "kind"]:
            problems.append(f"{why}: the spec's keys are {keys}, expected cdiVersion, containerEdits, devices, kind")
            continue
        for entry in spec["devices"]:
            edits = entry.get("containerEdits") if isinstance(entry, dict) else None
            shapes = (
                sorted(entry) if isinstance(entry, dict) else entry,
                sorted(edits) if isinstance(edits, dict) else edits,
                sorted({tuple(sorted(n)) for n in (edits or {}).get("deviceNodes") or [] if isinstance(n, dict)}),
            )
            if shapes != (["containerEdits", "name"], ["deviceNodes"], [("path",)]):
                problems.append(
                    f"{why}: device {entry.get('name') if isinstance(entry, dict) else entry!r} has the shape "
                    f"(keys, edit keys, device node keys) {shapes}, expected (['containerEdits', 'name'], "
                    "['deviceNodes'], [('path',)])"
                )
        problems += [f"{why}: a device node of the spec's own edits is {n!r}, expected {{'path': ...}} only"
                     for n in (spec.get("containerEdits") or {}).get("deviceNodes") or []
                     if not isinstance(n, dict) or sorted(n) != ["path"]]  # fmt: skip
    _report(problems, CDI_WHERE, "'Each device is ...' and 'Nothing else'")


GOOD_NODE = gpu_node(2, mig={1: ["3g.40gb"]}, seed=7)


def _bad(change) -> dict:
    node = copy.deepcopy(GOOD_NODE)
    change(node)
    return node


def _set(*path_and_value):
    *path, value = path_and_value

    def change(node):
        target = node
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return change


def _driver(version):
    """Driver `version` with every library renamed to match it (.so.<version>), so that only the
    version's own form is wrong: a submission that checks the libraries but never the version
    itself must not get a ValueError from the library rule instead."""

    def change(node):
        node["driver_version"] = version
        node["libraries"] = [lib.rsplit(".so.", 1)[0] + f".so.{version}" for lib in node["libraries"]]

    return change


_SPARE_MIG_UUID = "MIG-00000000-1111-2222-3333-444444444444"
BAD_NODES = [
    (_set("gpus", []), "no GPU"),
    (_set("gpus", None), "gpus not a list"),
    (_set("gpus", 0, "index", -1), "a negative index"),
    (_set("gpus", 0, "index", 0.0), "an index that is a float"),
    (_set("gpus", 0, "index", False), "an index that is a bool"),
    (_set("gpus", 0, "minor", -1), "a negative minor"),
    (_set("gpus", 0, "minor", "0"), "a minor that is a string"),
    (_set("gpus", 1, "index", 0), "two GPUs with index 0"),
    (_set("gpus", 1, "minor", 0), "two GPUs with minor 0"),
    (_set("gpus", 0, "uuid", "GPU-1234"), "a GPU UUID of the wrong form"),
    (_set("gpus", 0, "uuid", _SPARE_MIG_UUID), "a GPU whose UUID is a MIG UUID"),
    (lambda n: n["gpus"][0].update(uuid=n["gpus"][0]["uuid"].upper()), "a GPU UUID in uppercase hex"),
    (lambda n: n["gpus"][0].update(uuid=n["gpus"][1]["uuid"]), "two GPUs with one UUID"),
    (_set("gpus", 1, "mig", 0, "uuid", _SPARE_MIG_UUID.replace("MIG", "GPU")), "a MIG device with a GPU UUID"),
    (lambda n: n["gpus"][1]["mig"].append(dict(n["gpus"][1]["mig"][0], index=1)), "two MIG devices with one UUID"),
    (lambda n: n["gpus"][1]["mig"].append(dict(n["gpus"][1]["mig"][0], uuid=_SPARE_MIG_UUID)),
     "two MIG devices of one GPU with one index"),
    (_set("gpus", 1, "mig", 0, "index", -1), "a negative MIG index"),
    (_set("gpus", 1, "mig", 0, "gi_cap_minor", None), "a MIG device without its GPU instance's minor"),
    (_set("gpus", 1, "mig", 0, "ci_cap_minor", -3), "a negative compute instance minor"),
    (_set("gpus", 1, "mig_capable", False), "MIG devices on a GPU that cannot do MIG"),
    (_set("gpus", 1, "mig", "3g.40gb"), "mig that is a string"),
    (lambda n: n["gpus"][0].update(mig=[], mig_capable=False), "MIG mode without devices on a GPU that cannot do MIG"),
    (_set("driver_version", "550"), "a driver version without a dot"),
    (_set("driver_version", 550.9), "a driver version that is a number"),
    (_driver("550"), "a driver version without a dot, its libraries named .so.550"),
    (_driver(550.9), "a driver version that is a number, its libraries named .so.550.9"),
    (_driver("r550.90.07"), "a driver version with a letter, its libraries named to match"),
    (_driver("550.90."), "a driver version ending in a dot, its libraries named to match"),
    (_driver(None), "no driver version, its libraries named .so.None"),
    (_set("libraries", []), "no library"),
    (_set("libraries", "/usr/lib/x86_64-linux-gnu/libcuda.so.550.90.07"), "libraries as a string"),
    (_set("libraries", 0, "usr/lib/x86_64-linux-gnu/libcuda.so.550.90.07"), "a relative library path"),
    (_set("libraries", 0, "/usr/lib/x86_64-linux-gnu/libcuda.so.535.183.01"), "a library of another driver version"),
    (_set("libraries", 0, "/usr/lib/x86_64-linux-gnu/libcuda.so.1"), "an unversioned soname link"),
    (lambda n: n["libraries"].append(n["libraries"][0]), "a library listed twice"),
]  # fmt: skip


@pytest.mark.points(0.1)
@pytest.mark.parametrize(("change", "why"), BAD_NODES, ids=[why for _, why in BAD_NODES])
def test_bad_nodes_raise_value_error(submission, change, why):
    expect_exception("ValueError", lambda: submission.function("cdi_spec")(_bad(change)))


@pytest.mark.points(1)
def test_nodes_at_the_edges_of_the_rules_are_accepted(submission):
    """Valid, though unusual: a GPU in MIG mode with no MIG device, a GPU whose mig_capable is
    True but MIG off, minor 0 on the highest index, a MIG UUID with the same hex as a GPU's (two
    different UUIDs), one library."""
    node = gpu_node(3, mig={2: []}, seed=SEED + 5, minors=[2, 1, 0])
    node["gpus"][1]["mig"] = [
        {"index": 0, "uuid": node["gpus"][0]["uuid"].replace("GPU-", "MIG-"), "profile": "7g.80gb",
         "gi_cap_minor": 0, "ci_cap_minor": 0},
    ]  # fmt: skip
    node["libraries"] = node["libraries"][:1]
    spec = submission.function("cdi_spec")(node)
    want = [name for name, _ in ref.expected_devices(node)]
    got = ref.device_names(spec)
    assert got == want, f"device names {got}, expected {want} {CDI_WHERE})"


# ---------------------------------------------------------------------------------------------
# training_pod
# ---------------------------------------------------------------------------------------------

H100 = "NVIDIA-H100-80GB-HBM3"
PODS = [
    # every default: 8 whole GPUs, RDMA, 16Gi of /dev/shm, eth0, mlx5
    dict(job="llama-pretrain", rank=0, image="nvcr.io/nvidia/pytorch:25.01-py3", gpus=8, gpu_product=H100),
    # a rank with two digits, another namespace, interface and HCA list, a larger /dev/shm
    dict(job=f"moe-{TAG}", rank=13, image="registry.example.com/team/moe:v3", gpus=4,
         gpu_product="NVIDIA-A100-SXM4-80GB", shm_size="64Gi", namespace="team-7", socket_ifname="net1",
         ib_hca="=mlx5_0:1,mlx5_1:1"),
    # MIG devices instead of whole GPUs, no RDMA, /dev/shm given in Mi
    dict(job="bert-ft", rank=2, image="pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime", gpus=2,
         gpu_product="NVIDIA-A100-SXM4-40GB", mig_profile="3g.20gb", rdma=False, shm_size="2048Mi"),
    # one MIG device with media engines, RDMA on, the smallest /dev/shm allowed
    dict(job="tiny", rank=5, image="img", gpus=1, gpu_product=H100, mig_profile="1g.10gb+me", shm_size="1Gi"),
    # whole GPUs without RDMA, a decimal-suffix quantity, GPUs that cannot do MIG
    dict(job="l40s-ft", rank=1, image="img:latest", gpus=3, gpu_product="NVIDIA-L40S", rdma=False, shm_size="8G"),
]  # fmt: skip
POD_DEFAULTS = dict(
    mig_profile=None, shm_size="16Gi", rdma=True, namespace="default", socket_ifname="eth0", ib_hca="mlx5"
)


def _full(case: dict) -> dict:
    return {**POD_DEFAULTS, **case}


def _describe(case: dict) -> str:
    c = _full(case)
    return (
        f"training_pod({c['job']!r}, {c['rank']}, gpus={c['gpus']}, gpu_product={c['gpu_product']!r}, "
        f"mig_profile={c['mig_profile']!r}, shm_size={c['shm_size']!r}, rdma={c['rdma']})"
    )


def _all_pods(submission) -> list[tuple[dict, dict]]:
    got = submission.script([Step("training_pod", kwargs=case) for case in PODS]).steps[0]
    return list(zip(PODS, got))


def _the_container(pod: dict, case: dict) -> dict:
    found = ref.containers(pod)
    assert len(found) == 1, f"{_describe(case)}: expected exactly one container, got {len(found)} {POD_WHERE})"
    return found[0]


@pytest.mark.points(3)
def test_training_pod_loads_with_the_official_kubernetes_client_unchanged(submission):
    """V1Pod.from_dict, written back: nothing dropped (a misspelled field) or changed (a GPU count
    as an int where the schema has a quantity string)."""
    problems = []
    for case, pod in _all_pods(submission):
        problems += ref.pod_schema_problems(pod, _describe(case))
    _report(problems, POD_WHERE, "the schema reference is the official client: kubernetes.client.V1Pod")


@pytest.mark.points(3)
def test_training_pod_passes_kubernetes_strict_openapi_validation(submission):
    """kubernetes_validate.validate(pod, "1.31", strict=True): Kubernetes' own OpenAPI schema,
    no unknown field anywhere."""
    problems = []
    for case, pod in _all_pods(submission):
        problems += ref.openapi_problems(pod, _describe(case))
    _report(problems, POD_WHERE, "Kubernetes' OpenAPI schema")


@pytest.mark.points(1)
def test_the_pod_is_named_job_dash_rank_in_its_namespace_and_never_restarted_in_place(submission):
    problems = []
    for case, pod in _all_pods(submission):
        c = _full(case)
        got = (ref.dig(pod, "apiVersion"), ref.dig(pod, "kind"), ref.dig(pod, "metadata.name"),
               ref.dig(pod, "metadata.namespace"), ref.dig(pod, "spec.restartPolicy"))  # fmt: skip
        want = ("v1", "Pod", f"{c['job']}-{c['rank']}", c["namespace"], "Never")
        if got != want:
            problems.append(
                f"{_describe(case)}: (apiVersion, kind, name, namespace, restartPolicy) = {got}, expected {want}"
            )
    _report(problems, POD_WHERE, "apiVersion ... metadata, restartPolicy")


@pytest.mark.points(3)
def test_gpus_are_asked_for_in_limits_and_requests_never_differ_from_limits(submission):
    """The API server's rule for extended resources (nvidia.com/gpu, nvidia.com/mig-*, rdma/*):
    a limit, and a request only equal to it. A GPU in requests only is refused, saying why."""
    problems = []
    for case, pod in _all_pods(submission):
        problems += [f"{_describe(case)}: {p}" for p in ref.extended_resource_problems(pod)]
        c = _full(case)
        resource = "nvidia.com/gpu" if c["mig_profile"] is None else f"nvidia.com/mig-{c['mig_profile']}"
        limits = (_the_container(pod, case).get("resources") or {}).get("limits") or {}
        if limits.get(resource) != str(c["gpus"]):
            problems.append(
                f"{_describe(case)}: resources.limits[{resource!r}] is {limits.get(resource)!r}, expected "
                f"{str(c['gpus'])!r} (a quantity: a string)"
            )
    _report(problems, POD_WHERE, "resources.limits")


@pytest.mark.points(3)
def test_the_container_gets_a_memory_backed_dev_shm_of_the_given_size(submission):
    """A volume {emptyDir: {medium: Memory, sizeLimit: shm_size}} mounted at /dev/shm. A pod
    without it is refused, saying why (the container runtime's 64 MiB /dev/shm)."""
    problems = []
    for case, pod in _all_pods(submission):
        problems += [f"{_describe(case)}: {p}" for p in ref.shm_problems(pod, _full(case)["shm_size"])]
    _report(problems, POD_WHERE, "volumes and volumeMounts")


@pytest.mark.points(1)
def test_the_pod_runs_under_the_nvidia_runtime_class(submission):
    problems = []
    for case, pod in _all_pods(submission):
        got = ref.dig(pod, "spec.runtimeClassName")
        if got != "nvidia":
            problems.append(
                f"{_describe(case)}: spec.runtimeClassName is {got!r}, expected 'nvidia' (the RuntimeClass whose "
                "handler is the NVIDIA container runtime, which applies the CDI spec)"
            )
    _report(problems, POD_WHERE, "runtimeClassName")


GPU_TAINTS = [
    {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},  # the GPU Operator's examples
    {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"},  # managed clouds' GPU node pools
    {"key": "nvidia.com/gpu", "value": "", "effect": "NoSchedule"},
]
OTHER_TAINTS = [
    {"key": "node.kubernetes.io/unschedulable", "value": "", "effect": "NoSchedule"},  # a cordoned node
    {"key": "example.com/maintenance", "value": "true", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/not-ready", "value": "", "effect": "NoExecute"},
]


@pytest.mark.points(2)
def test_the_pod_tolerates_the_gpu_taint_whatever_its_value_and_no_other_taint(submission):
    """Kubernetes' matching rules (key, operator Exists/Equal, effect) applied to the pod's
    tolerations: every nvidia.com/gpu NoSchedule taint tolerated, a cordon or a maintenance taint
    not (a toleration with no key and Exists would tolerate them all)."""
    problems = []
    for case, pod in _all_pods(submission):
        missed = [t for t in GPU_TAINTS if not ref.tolerates(pod, t)]
        extra = [t for t in OTHER_TAINTS if ref.tolerates(pod, t)]
        if missed:
            problems.append(
                f"{_describe(case)}: tolerations {ref.dig(pod, 'spec.tolerations')!r} miss GPU taint(s) {missed}"
            )
        if extra:
            problems.append(
                f"{_describe(case)}: tolerations {ref.dig(pod, 'spec.tolerations')!r} also tolerate {extra}"
            )
    _report(problems, POD_WHERE, "tolerations")


@pytest.mark.points(2)
def test_the_pod_lands_only_on_nodes_labelled_with_its_gpu_product(submission):
    """Required node affinity on nvidia.com/gpu.product (GPU Feature Discovery's label), read as
    the scheduler reads it: a node of the product is admitted, a node of another product or
    without the label is not."""
    problems = []
    for case, pod in _all_pods(submission):
        product = case["gpu_product"]
        other = "NVIDIA-H200" if product != "NVIDIA-H200" else "NVIDIA-B200"
        nodes = [
            ({"nvidia.com/gpu.product": product, "kubernetes.io/os": "linux"}, True),
            ({"nvidia.com/gpu.product": other}, False),
            ({"kubernetes.io/os": "linux"}, False),
        ]
        for labels, want in nodes:
            if ref.admits(pod, labels) != want:
                problems.append(
                    f"{_describe(case)}: a node labelled {labels} is {'refused' if want else 'admitted'}; the pod must "
                    f"run only on nodes whose nvidia.com/gpu.product is {product!r} (spec.affinity: "
                    f"{ref.dig(pod, 'spec.affinity')!r})"
                )
    _report(problems, POD_WHERE, "affinity.nodeAffinity")


@pytest.mark.points(2)
def test_a_mig_profile_asks_for_mig_devices_and_no_whole_gpu(submission):
    problems = []
    for case, pod in _all_pods(submission):
        c = _full(case)
        got = {name: q.get("limits") for name, q in ref.extended_resources(pod, ("nvidia.com/",)).items()}
        want = {
            ("nvidia.com/gpu" if c["mig_profile"] is None else f"nvidia.com/mig-{c['mig_profile']}"): str(c["gpus"])
        }
        if got != want:
            problems.append(f"{_describe(case)}: the container's nvidia.com/ resources are {got}, expected {want}")
    _report(problems, POD_WHERE, "resources.limits: R")


def _nccl(container: dict) -> dict:
    return {k: v for k, v in ref.env_of(container).items() if k.startswith("NCCL_")}


@pytest.mark.points(2)
def test_rdma_pods_get_the_rdma_devices_ipc_lock_and_nccls_ib_environment(submission):
    problems = []
    for case, pod in _all_pods(submission):
        c = _full(case)
        if not c["rdma"]:
            continue
        container = _the_container(pod, case)
        limit = (ref.extended_resources(pod).get("rdma/rdma_shared_device_a") or {}).get("limits")
        if limit != "1":
            problems.append(
                f"{_describe(case)}: resources.limits['rdma/rdma_shared_device_a'] is {limit!r}, expected '1'"
            )
        if "IPC_LOCK" not in ref.capabilities_added(container):
            problems.append(
                f"{_describe(case)}: securityContext.capabilities.add is {ref.capabilities_added(container)}, without "
                "IPC_LOCK (RDMA registration pins memory beyond the default locked-memory limit)"
            )
        want = {"NCCL_SOCKET_IFNAME": c["socket_ifname"], "NCCL_IB_HCA": c["ib_hca"], "NCCL_IB_DISABLE": "0"}
        if _nccl(container) != want:
            problems.append(f"{_describe(case)}: the NCCL_ environment is {_nccl(container)}, expected exactly {want}")
    _report(problems, POD_WHERE, "with rdma")


@pytest.mark.points(2)
def test_pods_without_rdma_use_nccls_socket_transport_only(submission):
    problems = []
    for case, pod in _all_pods(submission):
        c = _full(case)
        if c["rdma"]:
            continue
        container = _the_container(pod, case)
        rdma = {k: v for k, v in ref.extended_resources(pod, ("rdma/",)).items()}
        if rdma:
            problems.append(f"{_describe(case)}: rdma=False, yet the container asks for {rdma}")
        if "IPC_LOCK" in ref.capabilities_added(container):
            problems.append(f"{_describe(case)}: rdma=False, yet IPC_LOCK is added")
        want = {"NCCL_SOCKET_IFNAME": c["socket_ifname"], "NCCL_IB_DISABLE": "1"}
        if _nccl(container) != want:
            problems.append(f"{_describe(case)}: the NCCL_ environment is {_nccl(container)}, expected exactly {want}")
    _report(problems, POD_WHERE, "without rdma")


@pytest.mark.points(1)
def test_the_container_runs_the_image_as_trainer(submission):
    problems = []
    for case, pod in _all_pods(submission):
        container = _the_container(pod, case)
        got = (container.get("name"), container.get("image"))
        if got != ("trainer", case["image"]):
            problems.append(
                f"{_describe(case)}: (name, image) of the container = {got}, expected ('trainer', {case['image']!r})"
            )
    _report(problems, POD_WHERE, "containers")


def _label(length: int) -> str:
    return "n" * length


@pytest.mark.points(1)
def test_names_labels_and_sizes_at_their_limits_are_accepted(submission):
    """A pod name of exactly 63 characters, a 63-character namespace and product, shm_size of
    exactly 1 GiB written as 1024Mi."""
    case = dict(job=_label(59), rank=100, image="img", gpus=1, gpu_product="A" * 63, namespace=_label(63),
                shm_size="1024Mi")  # fmt: skip
    pod = submission.function("training_pod")(**case)
    got = (ref.dig(pod, "metadata.name"), ref.dig(pod, "metadata.namespace"))
    assert got == (f"{_label(59)}-100", _label(63)), f"(name, namespace) = {got} {POD_WHERE})"
    problems = ref.openapi_problems(pod, _describe(case)) + ref.shm_problems(pod, "1024Mi")
    _report(problems, POD_WHERE, "63-character labels and 1 GiB are legal")


BAD_PODS = [
    (dict(job="Llama"), "a job name with an uppercase letter"),
    (dict(job="llama_7b"), "a job name with an underscore"),
    (dict(job="-llama"), "a job name starting with '-'"),
    (dict(job=""), "an empty job name"),
    (dict(job=_label(61), rank=10), "a pod name <job>-<rank> of 64 characters"),
    (dict(rank=-1), "rank -1"),
    (dict(rank=1.0), "a rank that is a float"),
    (dict(rank=True), "a rank that is a bool"),
    (dict(image=""), "an empty image"),
    (dict(image=None), "no image"),
    (dict(gpus=0), "zero GPUs"),
    (dict(gpus=-2), "negative GPUs"),
    (dict(gpus="8"), "gpus as a string"),
    (dict(gpus=True), "gpus a bool"),
    (dict(gpu_product=""), "an empty product"),
    (dict(gpu_product="NVIDIA H100"), "a product with a space"),
    (dict(gpu_product="A" * 64), "a product of 64 characters"),
    (dict(gpu_product="NVIDIA-H100-"), "a product ending with '-'"),
    (dict(mig_profile="1g"), "a MIG profile without memory"),
    (dict(mig_profile="mig-1g.10gb"), "a MIG profile given as the resource suffix"),
    (dict(mig_profile="0g.10gb"), "a MIG profile of 0 slices"),
    (dict(mig_profile=""), "an empty MIG profile"),
    (dict(shm_size="64Mi"), "Docker's 64 MiB /dev/shm"),
    (dict(shm_size="1023Mi"), "a /dev/shm just under 1 GiB"),
    (dict(shm_size="16GB"), "a size in a unit Kubernetes does not know"),
    (dict(shm_size=16 * 2**30), "a size that is a number, not a quantity string"),
    (dict(shm_size="-16Gi"), "a negative size"),
    (dict(rdma=1), "rdma as an int"),
    (dict(rdma="yes"), "rdma as a string"),
    (dict(namespace="Team"), "an uppercase namespace"),
    (dict(namespace=_label(64)), "a namespace of 64 characters"),
    (dict(socket_ifname=""), "an empty socket interface"),
    (dict(socket_ifname=None), "no socket interface"),
    (dict(ib_hca=""), "an empty HCA list with rdma on"),
]
GOOD_POD = dict(job="job", rank=0, image="img", gpus=8, gpu_product=H100)


@pytest.mark.points(0.1)
@pytest.mark.parametrize(("change", "why"), BAD_PODS, ids=[why for _, why in BAD_PODS])
def test_bad_pod_arguments_raise_value_error(submission, change, why):
    expect_exception("ValueError", lambda: submission.function("training_pod")(**{**GOOD_POD, **change}))


@pytest.mark.points(1)
def test_an_empty_hca_list_is_accepted_when_rdma_is_off(submission):
    pod = submission.function("training_pod")(**{**GOOD_POD, "rdma": False, "ib_hca": ""})
    env = _nccl(_the_container(pod, GOOD_POD))
    assert env == {"NCCL_SOCKET_IFNAME": "eth0", "NCCL_IB_DISABLE": "1"}, (
        f"with rdma=False, ib_hca is not used: expected the NCCL_ environment {{'NCCL_SOCKET_IFNAME': 'eth0', "
        f"'NCCL_IB_DISABLE': '1'}}, got {env} {POD_WHERE})"
    )
