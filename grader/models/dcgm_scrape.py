"""Given code of module orchestration (read it): scrapes of NVIDIA's DCGM exporter for a small
GPU fleet, made up from a seed, and the Kubernetes pods that run on it.

    from grader.models.dcgm_scrape import example_fleet, render
    fleet = example_fleet(seed=0)
    fleet.scrape            # what `curl <node>:9400/metrics` returns, every node's text joined
    fleet.pods              # the pods, as `kubectl get pods -A -o json`'s "items"
    fleet.faults            # what was injected: the findings a diagnosis must make

What a scrape is. dcgm-exporter (github.com/NVIDIA/dcgm-exporter) serves, per node, the
Prometheus text exposition format (version 0.0.4): for each metric a `# HELP` line, a `# TYPE`
line, then one sample per GPU,

    DCGM_FI_DEV_GPU_TEMP{gpu="3",UUID="GPU-...",pci_bus_id="00000000:3B:00.0",device="nvidia3",
        modelName="NVIDIA H100 80GB HBM3",Hostname="gpu-node-1",DCGM_FI_DRIVER_VERSION="550.90.07",
        container="trainer",namespace="research",pod="llama-pretrain-0-x7k2q"} 71

(on one line). The metric names are DCGM's field names (DCGM_FI_DEV_* device fields,
DCGM_FI_PROF_* profiling fields) and the labels are the exporter's: `gpu` (the NVML index),
`UUID`, `pci_bus_id`, `device`, `modelName`, `Hostname`, the driver version (a field the
exporter's counter list turns into a label), and, when the exporter maps GPUs to pods through
the kubelet's pod-resources API, `container`, `namespace` and `pod` on the GPUs a pod holds; a
GPU that no pod holds has no such labels. The metric set is the exporter's default list with
the profiling fields and the error counters a training fleet turns on (SM activity, NVLink
error counters, clock-event reasons); the HELP texts are this course's own words.

Values. Gauges are what DCGM last read: clocks in MHz, temperatures in C, power in W, memory in
MiB, utilizations in % (DCGM_FI_DEV_*_UTIL) or as a ratio 0..1 (DCGM_FI_PROF_*),
DCGM_FI_DEV_XID_ERRORS the last Xid error's number (0: none since the driver loaded), and
DCGM_FI_DEV_CLOCKS_EVENT_REASONS the clock-event reasons bitmask as NVML defines it. Counters
count since the driver loaded. A GPU that has fallen off the bus (Xid 79) cannot be read: it
reports its Xid and nothing else.
"""

from __future__ import annotations

import random
import string
from dataclasses import dataclass, field

MODEL = "NVIDIA H100 80GB HBM3"
DRIVER_VERSION = "550.90.07"
GPUS_PER_NODE = 8
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"  # the label the Job controller puts on its pods
CLOCKS_EVENT_REASONS = "DCGM_FI_DEV_CLOCKS_EVENT_REASONS"  # DCGM >= 3.3; before: ..._CLOCK_THROTTLE_REASONS
OLD_CLOCKS_EVENT_REASONS = "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"

# (metric name, Prometheus type, help text) in the order the exporter writes them.
METRICS: list[tuple[str, str, str]] = [
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock (MHz)."),
    ("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock (MHz)."),
    ("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "HBM temperature (C)."),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU die temperature (C)."),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Board power draw (W)."),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", "Energy used since the driver loaded (mJ)."),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "PCIe replays since the driver loaded."),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "Share of the sample period in which a kernel ran (%)."),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Share of the sample period in which memory was read or written (%)."),
    ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Number of the last Xid error (0: none)."),
    (CLOCKS_EVENT_REASONS, "gauge", "Why the clocks are below their maximum (NVML bitmask)."),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "Free frame buffer (MiB)."),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Used frame buffer (MiB)."),
    ("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "counter", "NVLink flow-control CRC errors, all links."),
    ("DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", "counter", "NVLink data CRC errors, all links."),
    ("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", "counter", "NVLink replays, all links."),
    ("DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", "counter", "NVLink recoveries, all links."),
    ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "counter", "NVLink traffic, all links."),
    ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter", "HBM rows remapped after uncorrectable errors."),
    ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter", "HBM rows remapped after correctable errors."),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge", "Share of time the graphics/compute engine was busy (ratio)."),
    ("DCGM_FI_PROF_SM_ACTIVE", "gauge", "Share of cycles an SM had at least one warp, over all SMs (ratio)."),
    ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "gauge", "Share of cycles the tensor pipes were busy (ratio)."),
    ("DCGM_FI_PROF_DRAM_ACTIVE", "gauge", "Share of cycles the HBM interface was busy (ratio)."),
]
METRIC_TYPES = {name: kind for name, kind, _ in METRICS}
METRIC_TYPES[OLD_CLOCKS_EVENT_REASONS] = "gauge"
NVLINK_ERROR_COUNTERS = (
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",
)
# The exporter's label order; pod labels come last, and only on GPUs a pod holds.
LABEL_ORDER = ("gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION")
POD_LABELS = ("container", "namespace", "pod")


@dataclass
class Gpu:
    """One GPU as the exporter sees it: where it is, who holds it, and its metric values (a
    metric missing from `values` is one the exporter had no value for, and writes no line)."""

    node: str
    index: int
    uuid: str
    values: dict[str, float]
    pod: str | None = None
    namespace: str | None = None
    container: str | None = None
    model: str = MODEL

    def labels(self) -> dict[str, str]:
        labels = {
            "gpu": str(self.index),
            "UUID": self.uuid,
            "pci_bus_id": f"00000000:{0x18 + 0x11 * self.index:02X}:00.0",
            "device": f"nvidia{self.index}",
            "modelName": self.model,
            "Hostname": self.node,
            "DCGM_FI_DRIVER_VERSION": DRIVER_VERSION,
        }
        if self.pod is not None:
            labels.update(container=self.container or "", namespace=self.namespace or "", pod=self.pod)
        return labels


@dataclass
class Fleet:
    """A scrape of every node, the pods, and what was injected (see example_fleet)."""

    gpus: list[Gpu]
    pods: list[dict]
    faults: list[dict] = field(default_factory=list)
    scrape: str = ""


def gpu_uuid(rng: random.Random) -> str:
    """A UUID in NVML's spelling: GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx."""
    digits = "".join(rng.choice("0123456789abcdef") for _ in range(32))
    return f"GPU-{digits[:8]}-{digits[8:12]}-{digits[12:16]}-{digits[16:20]}-{digits[20:]}"


def busy_values(rng: random.Random) -> dict[str, float]:
    """A GPU training a large model: SM activity 0.8-0.95, at its power cap (clock-event bit 0x4)."""
    sm_active = round(rng.uniform(0.80, 0.95), 6)
    return {
        "DCGM_FI_DEV_SM_CLOCK": float(rng.choice([1755, 1785, 1830, 1890, 1980])),
        "DCGM_FI_DEV_MEM_CLOCK": 2619.0,
        "DCGM_FI_DEV_MEMORY_TEMP": float(rng.randint(55, 68)),
        "DCGM_FI_DEV_GPU_TEMP": float(rng.randint(58, 72)),
        "DCGM_FI_DEV_POWER_USAGE": round(rng.uniform(610.0, 699.0), 3),
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": float(rng.randint(10**11, 10**12)),
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": 0.0,
        "DCGM_FI_DEV_GPU_UTIL": 100.0,
        "DCGM_FI_DEV_MEM_COPY_UTIL": float(rng.randint(35, 60)),
        "DCGM_FI_DEV_XID_ERRORS": 0.0,
        CLOCKS_EVENT_REASONS: 0x4,
        "DCGM_FI_DEV_FB_FREE": float(rng.randint(1500, 9000)),
        "DCGM_FI_DEV_FB_USED": float(rng.randint(71000, 79000)),
        **{name: 0.0 for name in NVLINK_ERROR_COUNTERS},
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": float(rng.randint(10**12, 10**13)),
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": 0.0,
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": float(rng.choice([0, 0, 0, 1])),
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE": round(min(1.0, sm_active + rng.uniform(0.02, 0.05)), 6),
        "DCGM_FI_PROF_SM_ACTIVE": sm_active,
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": round(sm_active * rng.uniform(0.45, 0.6), 6),
        "DCGM_FI_PROF_DRAM_ACTIVE": round(rng.uniform(0.3, 0.5), 6),
    }


def idle_values(rng: random.Random) -> dict[str, float]:
    """A GPU no one uses: clocks down, clock-event bit 0x1 (idle), nothing active."""
    values = busy_values(rng)
    values.update({
        "DCGM_FI_DEV_SM_CLOCK": 345.0, "DCGM_FI_DEV_GPU_TEMP": float(rng.randint(28, 34)),
        "DCGM_FI_DEV_MEMORY_TEMP": float(rng.randint(26, 32)), "DCGM_FI_DEV_POWER_USAGE": round(rng.uniform(68, 75), 3),
        "DCGM_FI_DEV_GPU_UTIL": 0.0, "DCGM_FI_DEV_MEM_COPY_UTIL": 0.0, CLOCKS_EVENT_REASONS: 0x1,
        "DCGM_FI_DEV_FB_FREE": 81004.0, "DCGM_FI_DEV_FB_USED": 0.0, "DCGM_FI_PROF_GR_ENGINE_ACTIVE": 0.0,
        "DCGM_FI_PROF_SM_ACTIVE": 0.0, "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": 0.0, "DCGM_FI_PROF_DRAM_ACTIVE": 0.0,
    })  # fmt: skip
    return values


def _number(value: float) -> str:
    """A value as the exporter prints it: integers without a decimal point."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _label_text(labels: dict[str, str]) -> str:
    escaped = (value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"') for value in labels.values())
    return ",".join(f'{name}="{value}"' for name, value in zip(labels, escaped))


def render(
    gpus: list[Gpu], *, help_and_type: bool = True, shuffle_labels: bool = False, seed: int = 0
) -> str:
    """The exposition text of `gpus` as the exporter writes it: metric by metric (in METRICS'
    order, then any other metric in name order), one line per GPU that has a value, labels in
    the exporter's order. help_and_type=False leaves out the `# HELP` and `# TYPE` lines (what
    a proxy that strips comments serves); shuffle_labels=True writes each line's labels in a
    random order (seeded), as the format allows."""
    rng = random.Random(seed)
    known = [name for name, _, _ in METRICS]
    others = sorted({name for gpu in gpus for name in gpu.values} - set(known))
    helps = {name: text for name, _, text in METRICS}
    lines = []
    for name in known + others:
        holders = [gpu for gpu in gpus if name in gpu.values]
        if not holders:
            continue
        if help_and_type:
            lines.append(f"# HELP {name} {helps.get(name, 'A DCGM field.')}")
            lines.append(f"# TYPE {name} {METRIC_TYPES.get(name, 'gauge')}")
        for gpu in holders:
            labels = gpu.labels()
            if shuffle_labels:
                items = list(labels.items())
                rng.shuffle(items)
                labels = dict(items)
            lines.append(f"{name}{{{_label_text(labels)}}} {_number(gpu.values[name])}")
    return "\n".join(lines) + "\n"


def pod_manifest(name: str, namespace: str, node: str, gpus: int, job: str | None = None) -> dict:
    """A running pod as the API server returns it (the fields a diagnosis reads, and a few more):
    a Job's pods carry the label batch.kubernetes.io/job-name."""
    labels = {"app.kubernetes.io/part-of": "training"}
    if job is not None:
        labels |= {JOB_NAME_LABEL: job, "job-name": job}
    container = {"name": "trainer", "image": "nvcr.io/nvidia/pytorch:25.01-py3",
                 "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}  # fmt: skip
    metadata = {"name": name, "namespace": namespace, "labels": labels}
    spec = {"nodeName": node, "containers": [container]}
    return dict(apiVersion="v1", kind="Pod", metadata=metadata, spec=spec, status={"phase": "Running"})


def _suffix(rng: random.Random) -> str:
    return "".join(rng.choice(string.ascii_lowercase + string.digits) for _ in range(5))


def example_fleet(seed: int = 0, nodes: int = 3, help_and_type: bool = True) -> Fleet:
    """A fleet of `nodes` (>= 3) nodes of 8 H100s, gpu-node-1 .. gpu-node-<nodes>, and its scrape:

    - job "llama-pretrain" (namespace "research"): an Indexed Job of 2 pods of 8 GPUs, on
      gpu-node-1 and gpu-node-2 (one job spread over two nodes);
    - job "eval-7b" (namespace "research"): 1 pod of 4 GPUs on gpu-node-3 (GPUs 0-3);
    - pod "notebook-<5 chars>" (namespace "dev", no Job): 1 GPU on gpu-node-3 (GPU 4);
    - GPUs 5-7 of gpu-node-3 and every GPU of the nodes after it: no pod, idle.

    Faults, on GPUs the seed picks: Xid 79 on a GPU of llama-pretrain (fallen off the bus: only
    its Xid is reported), a straggler of llama-pretrain (SM activity 0.05-0.15 while its peers
    are at 0.8-0.95; its GPU utilization still says 100 %: a kernel is always running),
    thermal throttling (clock-event bits 0x20 | 0x40 | 0x8, hot and slow) on a GPU of
    llama-pretrain, NVLink CRC errors on one GPU of gpu-node-2; and two that need no
    action: Xid 13 (an application's error) on a GPU of eval-7b, and every busy GPU at its power
    cap (bit 0x4). `faults` lists the findings a diagnosis must make, as dicts with the keys
    node, gpu, kind and detail ("xid": 79; "reasons"; "counters"; "sm_active").
    """
    if nodes < 3:
        raise ValueError(f"example_fleet needs at least 3 nodes, not {nodes}")
    rng = random.Random(seed)
    names = [f"gpu-node-{n + 1}" for n in range(nodes)]
    gpus = [Gpu(node, i, gpu_uuid(rng), idle_values(rng)) for node in names for i in range(GPUS_PER_NODE)]
    at = {(gpu.node, gpu.index): gpu for gpu in gpus}
    pods: list[dict] = []

    def place(pod: str, namespace: str, node: str, indices: range, job: str | None) -> None:
        pods.append(pod_manifest(pod, namespace, node, len(indices), job))
        for i in indices:
            gpu = at[node, i]
            gpu.pod, gpu.namespace, gpu.container = pod, namespace, "trainer"
            gpu.values = busy_values(rng)

    for index, node in enumerate(names[:2]):
        place(f"llama-pretrain-{index}-{_suffix(rng)}", "research", node, range(8), "llama-pretrain")
    place(f"eval-7b-0-{_suffix(rng)}", "research", names[2], range(4), "eval-7b")
    place(f"notebook-{_suffix(rng)}", "dev", names[2], range(4, 5), None)

    llama = [(node, i) for node in names[:2] for i in range(8)]
    fallen, straggler, hot = rng.sample(llama, 3)
    nvlink = (names[1], rng.randrange(8))
    faults = []
    at[fallen].values = {"DCGM_FI_DEV_XID_ERRORS": 79.0}
    faults.append({"node": fallen[0], "gpu": fallen[1], "kind": "xid", "detail": {"xid": 79}})
    slow = round(rng.uniform(0.05, 0.15), 6)
    at[straggler].values.update({
        "DCGM_FI_PROF_SM_ACTIVE": slow, "DCGM_FI_PROF_GR_ENGINE_ACTIVE": 0.97, "DCGM_FI_DEV_GPU_UTIL": 100.0,
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": round(slow / 3, 6), "DCGM_FI_DEV_POWER_USAGE": 240.5,
    })  # fmt: skip
    faults.append({"node": straggler[0], "gpu": straggler[1], "kind": "straggler", "detail": {"sm_active": slow}})
    at[hot].values.update({
        CLOCKS_EVENT_REASONS: 0x4 | 0x8 | 0x20 | 0x40, "DCGM_FI_DEV_SM_CLOCK": 1095.0, "DCGM_FI_DEV_GPU_TEMP": 91.0,
        "DCGM_FI_DEV_MEMORY_TEMP": 89.0,
    })  # fmt: skip
    reasons = ["sw_power_cap", "hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown"]
    faults.append({"node": hot[0], "gpu": hot[1], "kind": "throttling", "detail": {"reasons": reasons}})
    if nvlink in (fallen, straggler, hot):
        nvlink = next(key for key in ((names[1], i) for i in range(8)) if key not in (fallen, straggler, hot))
    crc = {"DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL": float(rng.randint(20, 400)),
           "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL": float(rng.randint(1, 30))}  # fmt: skip
    at[nvlink].values.update(crc)
    faults.append({"node": nvlink[0], "gpu": nvlink[1], "kind": "nvlink_errors", "detail": {"counters": crc}})
    at[names[2], rng.randrange(4)].values["DCGM_FI_DEV_XID_ERRORS"] = 13.0  # the application's own fault
    faults.sort(key=lambda f: (f["node"], f["gpu"], f["kind"]))
    fleet = Fleet(gpus, pods, faults)
    fleet.scrape = "".join(
        render([gpu for gpu in gpus if gpu.node == node], help_and_type=help_and_type) for node in names
    )
    return fleet
