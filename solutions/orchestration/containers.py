"""A GPU in a container: the CDI spec of a node's GPUs and the pod of one training rank
(lecture 15-orchestration, sections 1 and 2).

Two documents decide whether a training process sees its GPUs inside a container:

- The **Container Device Interface (CDI) spec** of the node: a JSON file (in /etc/cdi or
  /var/run/cdi) that says, for each device a container may ask for by name
  (`nvidia.com/gpu=0`, `nvidia.com/gpu=GPU-<uuid>`, `nvidia.com/gpu=all`), which edits the
  container runtime makes to the container's OCI spec: the device nodes to create, the driver's
  libraries to bind-mount, the hooks to run and the environment to set. The NVIDIA Container
  Toolkit writes it (`nvidia-ctk cdi generate`); containerd and CRI-O apply it.
- The **pod** of the rank: what the Kubernetes scheduler reads to place it on a node with free
  GPUs of the right product, and what the kubelet reads to start its container with those GPUs
  (from the NVIDIA device plugin), the RDMA NICs, a large /dev/shm and NCCL's environment.

A node's GPUs are given as plain data, as `grader.models.gpu_node.gpu_node` builds them:

    {"driver_version": "550.90.07",
     "libraries": ["/usr/lib/x86_64-linux-gnu/libcuda.so.550.90.07", ...],
     "gpus": [{"index": 0, "uuid": "GPU-1c8f...", "minor": 0, "product": "NVIDIA-H100-80GB-HBM3",
               "mig_capable": True, "mig": None},
              {"index": 7, "uuid": "GPU-9a0b...", "minor": 7, "product": "NVIDIA-H100-80GB-HBM3",
               "mig_capable": True,
               "mig": [{"index": 0, "uuid": "MIG-4d2e...", "profile": "3g.40gb",
                        "gi_cap_minor": 957, "ci_cap_minor": 958}, ...]}, ...]}

`index` is the GPU's NVML index (what nvidia-smi prints), `minor` the minor number of its device
node /dev/nvidia<minor> (not always the index), `mig` None when MIG mode is off, else the list
of the GPU's MIG devices (each a GPU instance with one compute instance: its own UUID, and the
minors of the two capability device nodes /dev/nvidia-caps/nvidia-cap<minor> that grant access
to the GPU instance and to the compute instance).
"""

from __future__ import annotations

import posixpath
import re

# ---- the CDI spec (what nvidia-ctk cdi generate writes, simplified: see the lecture) ----------

# The lowest CDI spec version whose features the spec uses: device names that start with a digit
# ("0", "7:1") need 0.5.0. nvidia-ctk writes the lowest version its spec needs, as here.
CDI_VERSION = "0.5.0"
CDI_KIND = "nvidia.com/gpu"  # vendor/class: a container asks for nvidia.com/gpu=<device name>
# Device nodes every GPU process opens, whichever GPUs it has: the driver's control device, the
# unified-memory devices, and the mode-setting device.
CONTROL_DEVICE_NODES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset")
# Bind mounts of the host's driver libraries: read-only, no setuid, no device files.
LIBRARY_MOUNT_OPTIONS = ("ro", "nosuid", "nodev", "bind")
# The toolkit's hook binary; `update-ldcache --folder DIR` runs ldconfig in the container so that
# the mounted libraries are found (libcuda.so.1 -> libcuda.so.<driver version>).
CDI_HOOK = "/usr/bin/nvidia-cdi-hook"
# Set in the container: tells the toolkit's legacy runtime hook that CDI did the work already.
VISIBLE_DEVICES_VOID = "NVIDIA_VISIBLE_DEVICES=void"

GPU_UUID = re.compile(r"GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
MIG_UUID = re.compile(r"MIG-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
DRIVER_VERSION = re.compile(r"[0-9]+(\.[0-9]+)+")


def gpu_device_node(minor: int) -> str:
    """The device node of the GPU whose device minor is `minor`."""
    return f"/dev/nvidia{minor}"


def cap_device_node(minor: int) -> str:
    """The MIG capability device node of minor `minor` (a GPU or compute instance's access)."""
    return f"/dev/nvidia-caps/nvidia-cap{minor}"


def _whole(value: object) -> bool:
    """True for an int that is not a bool (True is an int in Python, but not a count)."""
    return isinstance(value, int) and not isinstance(value, bool)


def cdi_spec(node: dict) -> dict:
    """The CDI spec of `node`'s GPUs (the module docstring gives the node's data) as a plain dict,
    what `json.load` of the file nvidia-ctk writes gives:

        {"cdiVersion": CDI_VERSION, "kind": CDI_KIND, "devices": [...], "containerEdits": {...}}

    It must validate against the CDI specification (the hidden suite checks it with a JSON schema
    of CDI spec v0.7.0), so device names and fields are the spec's. Each device is
    {"name": NAME, "containerEdits": {"deviceNodes": [{"path": PATH}, ...]}}, with these devices in
    this order:

    1. Each GPU whose `mig` is None, in increasing `index` (whatever the order of node["gpus"]):
       two devices with the same edits, named str(index) ("0") then its UUID, whose deviceNodes
       are [/dev/nvidia<minor>] (gpu_device_node).
    2. Each MIG device, by its GPU's `index` then its own `index`: two devices named
       "<gpu index>:<mig index>" ("7:0") then its UUID ("MIG-..."), whose deviceNodes are
       [/dev/nvidia<gpu minor>, /dev/nvidia-caps/nvidia-cap<gi_cap_minor>,
       /dev/nvidia-caps/nvidia-cap<ci_cap_minor>] in this order (cap_device_node). A GPU in MIG
       mode has no device of its own: only its MIG devices can be given to containers, and a GPU
       in MIG mode without MIG devices (`mig` == []) gives no device at all.
    3. "all": every device node of the devices above, each once, in the order they first appear.

    The spec's own "containerEdits" apply to a container that gets any of the devices:
        "env": [VISIBLE_DEVICES_VOID];
        "deviceNodes": [{"path": p} for p in CONTROL_DEVICE_NODES], in that order;
        "mounts": one per library of node["libraries"], in their order: {"hostPath": lib,
            "containerPath": lib, "options": list(LIBRARY_MOUNT_OPTIONS)};
        "hooks": [{"hookName": "createContainer", "path": CDI_HOOK, "args": ["nvidia-cdi-hook",
            "update-ldcache", "--folder", D1, "--folder", D2, ...]}] where D1, D2, ... are the
            folders of the libraries (posixpath.dirname), each once, in order of first appearance.
    Nothing else: no other key in the spec, in a device, in an edit or in a device node.

    Raises ValueError when: node["gpus"] is not a non-empty list; a GPU's `index` or `minor` is
    not an integer >= 0 (bool is not an integer here); two GPUs have the same `index` or the same
    `minor`; a GPU's `uuid` does not match GPU_UUID or a MIG device's does not match MIG_UUID; two
    devices (GPUs or MIG devices) have the same UUID; a GPU's `mig` is neither None nor a list, or
    is a list while its `mig_capable` is not True; a MIG device's `index`, `gi_cap_minor` or
    `ci_cap_minor` is not an integer >= 0, or two MIG devices of one GPU have the same `index`;
    node["driver_version"] is not a string matching DRIVER_VERSION ("550.90.07"); node["libraries"]
    is not a non-empty list of distinct absolute paths (starting with "/") whose file names end in
    ".so.<driver_version>" (a library of another driver version is the "driver/library version
    mismatch" NVML reports).
    """
    ### BEGIN SOLUTION
    gpus = node.get("gpus") if isinstance(node, dict) else None
    if not isinstance(gpus, list) or not gpus:
        raise ValueError(f"node['gpus'] must be a non-empty list of GPUs, not {gpus!r}")
    version = node.get("driver_version")
    if not isinstance(version, str) or not DRIVER_VERSION.fullmatch(version):
        raise ValueError(f"node['driver_version'] must look like '550.90.07', not {version!r}")
    libraries = node.get("libraries")
    if not isinstance(libraries, list) or not libraries:
        raise ValueError(f"node['libraries'] must be a non-empty list of paths, not {libraries!r}")
    for library in libraries:
        if not isinstance(library, str) or not library.startswith("/"):
            raise ValueError(f"library {library!r} is not an absolute path")
        if not posixpath.basename(library).endswith(f".so.{version}"):
            raise ValueError(
                f"library {library!r} is not of driver {version} (its name must end in .so.{version}): "
                "a driver/library version mismatch"
            )
    if len(set(libraries)) != len(libraries):
        raise ValueError(f"node['libraries'] lists a library twice: {libraries!r}")

    uuids: set[str] = set()

    def new_uuid(uuid: object, pattern: re.Pattern, what: str) -> None:
        """Checks `uuid`'s form and that no device seen so far has it, then records it."""
        if not isinstance(uuid, str) or not pattern.fullmatch(uuid):
            raise ValueError(f"{what}'s uuid {uuid!r} does not match {pattern.pattern}")
        if uuid in uuids:
            raise ValueError(f"uuid {uuid} belongs to two devices")
        uuids.add(uuid)

    for gpu in gpus:
        for key in ("index", "minor"):
            if not _whole(gpu.get(key)) or gpu[key] < 0:
                raise ValueError(f"a GPU's {key} must be an integer >= 0, not {gpu.get(key)!r}")
        new_uuid(gpu.get("uuid"), GPU_UUID, f"GPU {gpu['index']}")
        slices = gpu.get("mig")
        if slices is None:
            continue
        if not isinstance(slices, list):
            raise ValueError(f"GPU {gpu['index']}'s mig must be None or a list, not {slices!r}")
        if gpu.get("mig_capable") is not True:
            raise ValueError(f"GPU {gpu['index']} has MIG devices but does not support MIG (mig_capable is not True)")
        for mig in slices:
            for key in ("index", "gi_cap_minor", "ci_cap_minor"):
                if not _whole(mig.get(key)) or mig[key] < 0:
                    raise ValueError(f"a MIG device's {key} must be an integer >= 0, not {mig.get(key)!r}")
            new_uuid(mig.get("uuid"), MIG_UUID, f"MIG device {gpu['index']}:{mig['index']}")
        if len({mig["index"] for mig in slices}) != len(slices):
            raise ValueError(f"two MIG devices of GPU {gpu['index']} have the same index")
    for key in ("index", "minor"):
        if len({gpu[key] for gpu in gpus}) != len(gpus):
            raise ValueError(f"two GPUs have the same {key}")

    def device(name: str, paths: list[str]) -> dict:
        return {"name": name, "containerEdits": {"deviceNodes": [{"path": path} for path in paths]}}

    devices = []
    ordered = sorted(gpus, key=lambda gpu: gpu["index"])
    for gpu in ordered:
        if gpu.get("mig") is None:
            paths = [gpu_device_node(gpu["minor"])]
            devices += [device(str(gpu["index"]), paths), device(gpu["uuid"], paths)]
    for gpu in ordered:
        for mig in sorted(gpu.get("mig") or [], key=lambda mig: mig["index"]):
            paths = [
                gpu_device_node(gpu["minor"]),
                cap_device_node(mig["gi_cap_minor"]),
                cap_device_node(mig["ci_cap_minor"]),
            ]
            devices += [device(f"{gpu['index']}:{mig['index']}", paths), device(mig["uuid"], paths)]
    every = [node["path"] for dev in devices for node in dev["containerEdits"]["deviceNodes"]]
    devices.append(device("all", list(dict.fromkeys(every))))  # dict keeps first appearances in order

    folders = list(dict.fromkeys(posixpath.dirname(library) for library in libraries))
    args = ["nvidia-cdi-hook", "update-ldcache"]
    for folder in folders:
        args += ["--folder", folder]
    return {
        "cdiVersion": CDI_VERSION,
        "kind": CDI_KIND,
        "devices": devices,
        "containerEdits": {
            "env": [VISIBLE_DEVICES_VOID],
            "deviceNodes": [{"path": path} for path in CONTROL_DEVICE_NODES],
            "mounts": [
                {"hostPath": library, "containerPath": library, "options": list(LIBRARY_MOUNT_OPTIONS)}
                for library in libraries
            ],
            "hooks": [{"hookName": "createContainer", "path": CDI_HOOK, "args": args}],
        },
    }
    ### END SOLUTION


# ---- the pod of one training rank ------------------------------------------------------------

GPU_RESOURCE = "nvidia.com/gpu"  # the NVIDIA device plugin's whole GPUs
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"  # + a profile: the device plugin's MIG devices ("mixed" strategy)
# The RDMA shared device plugin's resource (Mellanox k8s-rdma-shared-dev-plugin, deployed by the
# NVIDIA Network Operator): every pod that asks gets the node's RDMA devices (/dev/infiniband/*)
# shared, which is what a training pod on a node with one NIC per GPU needs; SR-IOV virtual
# functions (one NIC slice per pod) are the other way, and need a network per pod.
RDMA_RESOURCE = "rdma/rdma_shared_device_a"
GPU_TAINT_KEY = "nvidia.com/gpu"  # GPU nodes are tainted so that pods without GPUs stay off them
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"  # set on each node by GPU Feature Discovery
RUNTIME_CLASS = "nvidia"  # the RuntimeClass whose handler is the NVIDIA container runtime
CONTAINER_NAME = "trainer"
SHM_VOLUME = "dshm"
MIN_SHM_BYTES = 2**30  # 1 GiB: far above the 64 MiB a container runtime gives /dev/shm by default

DNS_1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
MAX_LABEL = 63
# A label value (as Kubernetes checks them): at most 63 characters, alphanumerics at both ends,
# '-', '_' and '.' between.
LABEL_VALUE = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
MIG_PROFILE = re.compile(r"[1-9][0-9]*g\.[1-9][0-9]*gb(\+me)?")  # "1g.10gb", "3g.40gb", "1g.10gb+me"
# A Kubernetes quantity: a decimal number and an optional binary (Ki .. Ei) or decimal suffix.
QUANTITY = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E)?")
_SUFFIX = {"": 1, "m": 1e-3, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}
_SUFFIX.update({f"{p}i": 2 ** (10 * (i + 1)) for i, p in enumerate("KMGTPE")})


def quantity_bytes(quantity: object) -> float | None:
    """The value of a Kubernetes quantity string ("16Gi" -> 17179869184.0, "500M" -> 5e8), or
    None when `quantity` is not one this helper reads: not a string, signed, an exponent ("1e9",
    which Kubernetes also takes), or a unit Kubernetes does not know ("16GB")."""
    match = QUANTITY.fullmatch(quantity) if isinstance(quantity, str) else None
    if match is None:
        return None
    return float(match.group(1)) * _SUFFIX[match.group(2) or ""]


def training_pod(
    job: str,
    rank: int,
    image: str,
    gpus: int,
    gpu_product: str,
    mig_profile: str | None = None,
    shm_size: str = "16Gi",
    rdma: bool = True,
    namespace: str = "default",
    socket_ifname: str = "eth0",
    ib_hca: str = "mlx5",
) -> dict:
    """The pod of rank `rank` of training job `job`, as a plain dict (what `kubectl apply -f`
    reads, parsed). The schema reference is Kubernetes' own: the dict must load with the official
    client's model (`kubernetes.client.V1Pod.from_dict`) with no field dropped or changed, and
    pass `kubernetes_validate.validate(pod, "1.31", strict=True)` (Kubernetes' OpenAPI schema, no
    unknown field). Quantities are strings ("8", "16Gi"). The fields below are graded; any other
    field is yours to add as long as the schemas take it and it changes none of the behaviour
    below.

    apiVersion "v1", kind "Pod", metadata {name: "<job>-<rank>", namespace: namespace};
    spec:
        runtimeClassName RUNTIME_CLASS ("nvidia"); restartPolicy "Never";
        tolerations: {"key": GPU_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"} (it
            tolerates the GPU nodes' taint whatever its value; no toleration of other taints);
        affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution: one nodeSelectorTerm
            with the matchExpression {"key": GPU_PRODUCT_LABEL, "operator": "In", "values":
            [gpu_product]}: the pod runs only on nodes whose label nvidia.com/gpu.product is
            gpu_product;
        volumes: {"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": shm_size}};
        containers: exactly one, named CONTAINER_NAME ("trainer"), with image `image` and
            volumeMounts {"name": SHM_VOLUME, "mountPath": "/dev/shm"};
            resources.limits: {R: str(gpus)} where R is GPU_RESOURCE when mig_profile is None, else
                MIG_RESOURCE_PREFIX + mig_profile ("nvidia.com/mig-1g.10gb": `gpus` MIG devices,
                no nvidia.com/gpu); with rdma, also {RDMA_RESOURCE: "1"}. Extended resources go in
                limits; `requests`, if you set them, must equal the limits for these resources;
            with rdma, securityContext.capabilities.add contains "IPC_LOCK" (RDMA pins the memory
                it registers, beyond the default locked-memory limit); without rdma, IPC_LOCK is
                not added;
            env (a list of {"name", "value"}), whose NCCL_ variables are exactly:
                NCCL_SOCKET_IFNAME = socket_ifname (the interface for NCCL's bootstrap and its
                    socket transport);
                with rdma: NCCL_IB_HCA = ib_hca (the RDMA devices NCCL may use, by name prefix) and
                    NCCL_IB_DISABLE = "0";
                without rdma: NCCL_IB_DISABLE = "1" (sockets only) and no NCCL_IB_HCA.

    Raises ValueError when: `job` is not an RFC 1123 label (lowercase letters, digits and '-',
    alphanumeric at both ends) or "<job>-<rank>" is longer than 63 characters; `rank` is not an
    integer >= 0; `image` is not a non-empty string; `gpus` is not an integer >= 1 (a training
    rank without a GPU is refused); `gpu_product` is not a label value (1 to 63 characters, letters,
    digits, '-', '_' or '.', alphanumeric at both ends); `mig_profile` is neither None nor a MIG
    profile matching MIG_PROFILE ("1g.10gb", "3g.40gb", "1g.10gb+me"); `shm_size` is not a
    quantity (quantity_bytes gives None) or is below MIN_SHM_BYTES (1 GiB); `rdma` is not a bool;
    `namespace` is not an RFC 1123 label of at most 63 characters; `socket_ifname` is not a
    non-empty string; `ib_hca` is not a non-empty string while rdma is True (bool is not an
    integer here).
    """
    ### BEGIN SOLUTION
    if not isinstance(job, str) or not DNS_1123_LABEL.fullmatch(job):
        raise ValueError(f"job must be an RFC 1123 label (lowercase letters, digits and '-'), not {job!r}")
    if not _whole(rank) or rank < 0:
        raise ValueError(f"rank must be an integer >= 0, not {rank!r}")
    name = f"{job}-{rank}"
    if len(name) > MAX_LABEL:
        raise ValueError(f"the pod's name {name!r} is longer than {MAX_LABEL} characters")
    if not isinstance(image, str) or not image:
        raise ValueError(f"image must be a non-empty string, not {image!r}")
    if not _whole(gpus) or gpus < 1:
        raise ValueError(f"gpus must be an integer >= 1 (a training rank needs a GPU), not {gpus!r}")
    if not isinstance(gpu_product, str) or len(gpu_product) > MAX_LABEL or not LABEL_VALUE.fullmatch(gpu_product):
        raise ValueError(f"gpu_product must be a label value (e.g. 'NVIDIA-H100-80GB-HBM3'), not {gpu_product!r}")
    if mig_profile is not None and (not isinstance(mig_profile, str) or not MIG_PROFILE.fullmatch(mig_profile)):
        raise ValueError(f"mig_profile must be None or a MIG profile such as '1g.10gb', not {mig_profile!r}")
    size = quantity_bytes(shm_size)
    if size is None or size < MIN_SHM_BYTES:
        raise ValueError(f"shm_size must be a quantity of at least 1Gi, not {shm_size!r}")
    if not isinstance(rdma, bool):
        raise ValueError(f"rdma must be a bool, not {rdma!r}")
    if not isinstance(namespace, str) or len(namespace) > MAX_LABEL or not DNS_1123_LABEL.fullmatch(namespace):
        raise ValueError(f"namespace must be an RFC 1123 label of at most {MAX_LABEL} characters, not {namespace!r}")
    if not isinstance(socket_ifname, str) or not socket_ifname:
        raise ValueError(f"socket_ifname must be a non-empty string, not {socket_ifname!r}")
    if rdma and (not isinstance(ib_hca, str) or not ib_hca):
        raise ValueError(f"ib_hca must be a non-empty string when rdma is on, not {ib_hca!r}")

    resource = GPU_RESOURCE if mig_profile is None else MIG_RESOURCE_PREFIX + mig_profile
    # Extended resources cannot be overcommitted: they are asked for in limits, and Kubernetes
    # sets the requests equal to them.
    limits = {resource: str(gpus)}
    env = [{"name": "NCCL_SOCKET_IFNAME", "value": socket_ifname}]
    container: dict = {
        "name": CONTAINER_NAME,
        "image": image,
        "resources": {"limits": limits},
        # NCCL's shared-memory transport and DataLoader workers use /dev/shm, which the container
        # runtime makes 64 MiB unless a memory-backed volume is mounted there.
        "volumeMounts": [{"name": SHM_VOLUME, "mountPath": "/dev/shm"}],
        "env": env,
    }
    if rdma:
        limits[RDMA_RESOURCE] = "1"
        env += [{"name": "NCCL_IB_HCA", "value": ib_hca}, {"name": "NCCL_IB_DISABLE", "value": "0"}]
        # Registering memory with the NIC pins it: the container needs to lock more than the
        # default RLIMIT_MEMLOCK.
        container["securityContext"] = {"capabilities": {"add": ["IPC_LOCK"]}}
    else:
        env.append({"name": "NCCL_IB_DISABLE", "value": "1"})

    product_term = {"matchExpressions": [{"key": GPU_PRODUCT_LABEL, "operator": "In", "values": [gpu_product]}]}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "runtimeClassName": RUNTIME_CLASS,
            "restartPolicy": "Never",
            "tolerations": [{"key": GPU_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}],
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [product_term]}
                }
            },
            "containers": [container],
            "volumes": [{"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": shm_size}}],
        },
    }
    ### END SOLUTION
