# Your working copy: replace every `raise NotImplementedError` with your implementation.
# (Generated from the course's reference by `python -m grader sync`.)
"""GPU monitoring: a DCGM exporter scrape read, joined to pods and diagnosed, and the same alerts
as Prometheus rules (lecture 15-orchestration, sections 5 and 6).

NVIDIA's dcgm-exporter serves each node's GPU counters in the Prometheus text exposition format;
`grader/models/dcgm_scrape.py` makes such scrapes for a small fleet (read its docstring for the
metric names and labels). You read a scrape with the real parser of the `prometheus_client`
package, join its GPUs to the pods and Jobs that hold them, decide which GPU needs what, and
then write the same checks as Prometheus alerting rules, graded by Prometheus' own `promtool
test rules`.

The tables below are given: which Xid errors mean what (NVIDIA's "Xid Errors" catalog, folded
by this course into two actions) and the clock-event reasons bits (NVML's
nvmlClocksEventReasons constants).
"""

from __future__ import annotations

import re
import statistics

import yaml
from prometheus_client.parser import text_string_to_metric_families

JOB_NAME_LABEL = "batch.kubernetes.io/job-name"  # the label the Job controller puts on its pods

# Xid errors whose GPU must leave service: the node is drained (cordoned, its pods evicted) and
# the GPU goes to repair or field diagnostics.
DRAIN_XIDS = {
    48: "double-bit ECC error",
    64: "row remapping failed: no spare row for a failing HBM address",
    79: "GPU has fallen off the bus",
    95: "uncontained ECC error: corrupted data may have reached other work",
}
# Xid errors that a GPU reset clears: drain the GPU's pods, reset it, return it to service
# (a repeat makes it a drain).
RESET_XIDS = {
    63: "row remapping pending: applied at the next GPU reset",
    74: "NVLink error",
    94: "contained ECC error: only the application that touched the row is affected",
}
# Xid errors an application causes (a bad address, an illegal instruction, a killed process):
# the job's own logs explain them, and the hardware is fine.
APPLICATION_XIDS = {
    13: "graphics engine exception (e.g. an out-of-range access in a kernel)",
    31: "GPU memory page fault (an illegal address)",
    43: "GPU stopped processing (the application's channel was reset)",
    45: "preemptive cleanup after an earlier error or a killed process",
}

# NVML's clock-event reasons (nvmlClocksEventReasons, formerly nvmlClocksThrottleReasons): bit ->
# name. 0x1, 0x2, 0x4, 0x10 and 0x100 are the clock policy at work; 0x8, 0x20, 0x40 and 0x80 a
# protection slowing the GPU down.
CLOCK_EVENT_REASONS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
THROTTLING_BITS = 0x8 | 0x20 | 0x40 | 0x80
THERMAL_BITS = 0x20 | 0x40
CLOCKS_EVENT_REASONS = "DCGM_FI_DEV_CLOCKS_EVENT_REASONS"  # DCGM >= 3.3
OLD_CLOCKS_EVENT_REASONS = "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"  # the same field's earlier name
NVLINK_ERROR_COUNTERS = (
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",
)
SM_ACTIVE = "DCGM_FI_PROF_SM_ACTIVE"
# kube-state-metrics' series of a pod's labels; a label L becomes label_<L with non-alphanumerics as _>.
KUBE_POD_LABELS = "kube_pod_labels"
JOB_LABEL_IN_PROMETHEUS = "label_batch_kubernetes_io_job_name"
ALERTS = ("GpuXidRequiresDrain", "GpuXidRequiresReset", "GpuThermalThrottling", "NvlinkErrors", "GpuStragglerInJob")
PROMETHEUS_DURATION = re.compile(r"[1-9][0-9]*(ms|s|m|h|d|w|y)")


def gpu_samples(scrape: str) -> list[dict]:
    """The GPUs of a DCGM exporter scrape, one record per GPU, sorted by (node, gpu).

    `scrape` is the text of one or more scrapes (several nodes' texts joined), in the Prometheus
    text exposition format, with or without `# HELP` / `# TYPE` lines. Read it with
    `prometheus_client.parser.text_string_to_metric_families` (the real parser). Only metrics
    whose name starts with "DCGM_FI_" count (a DCGM field); others are ignored. A GPU is one
    (`Hostname`, `gpu`) pair; each record is

        {"node": Hostname label, "gpu": gpu label as an int, "uuid": UUID label,
         "model": modelName label or None when absent,
         "namespace": ..., "pod": ..., "container": ...,
         "metrics": {metric name: float value}}

    where namespace, pod and container are the labels dcgm-exporter adds when it maps GPUs to
    pods, or None for a GPU no pod holds (the label absent or empty). A metric is keyed by the
    name the exporter wrote, the metric family's name: the parser's sample names of a family
    typed `counter` get "_total" appended, so the name is the same with and without # TYPE lines.
    Label order does not matter. A scrape with no DCGM_FI_ metric gives [].

    Raises ValueError when: the text is not in the exposition format (the parser refuses it); a
    DCGM_FI_ sample has no `gpu`, `UUID` or `Hostname` label; a `gpu` label is not a whole number
    >= 0 (such as "0", "7"); a sample has a non-empty `pod` label but no non-empty `namespace`; two
    samples of one GPU disagree on its UUID, model or pod labels; the same metric occurs twice for
    one GPU (MIG instances and GPUs shared by several pods are out of scope).
    """
    raise NotImplementedError("implement gpu_samples (lectures/15-orchestration.md, section 5)")


def diagnose(scrape: str, pods: list[dict], straggler_ratio: float = 0.5) -> list[dict]:
    """What needs doing on which GPU, from a DCGM exporter scrape (read with gpu_samples) and
    the pods running on the fleet (`pods`: Pod objects as dicts, as `kubectl get pods -A -o
    json` lists them in "items"; only metadata.name, metadata.namespace and metadata.labels are
    read).

    Each finding is a dict

        {"node", "gpu", "uuid", "namespace", "pod", "job", "kind", "action", "detail"}

    with node, gpu, uuid, namespace and pod from the GPU's record (None where no pod holds it),
    and job the value of the label "batch.kubernetes.io/job-name" of the pod of that namespace
    and name in `pods` (None for a GPU without a pod, a pod without that label, or a pod not in
    `pods`). A job is a (namespace, job) pair: the same job name in two namespaces is two jobs.
    The kinds, each at most once per GPU:

    - "xid": DCGM_FI_DEV_XID_ERRORS (the last Xid, 0 for none) is in DRAIN_XIDS (action
      "drain") or RESET_XIDS (action "reset_gpu"); detail {"xid": the number as an int}. Any
      other Xid (APPLICATION_XIDS such as 13, 31, 43 and numbers in neither table) is no finding.
    - "throttling": the clock-event reasons bitmask (DCGM_FI_DEV_CLOCKS_EVENT_REASONS, or its
      earlier name DCGM_FI_DEV_CLOCK_THROTTLE_REASONS when the first is absent) has a bit of
      THROTTLING_BITS (hardware slowdown 0x8, software thermal 0x20, hardware thermal 0x40,
      power brake 0x80); action "investigate"; detail {"reasons": the names in
      CLOCK_EVENT_REASONS of every bit set, in increasing bit order} (bits NVML does not define
      are left out). The other reasons alone (idle, applications clocks, the software power cap
      that holds a busy GPU at its power limit, sync boost, display clock) are no finding.
    - "nvlink_errors": one of the NVLINK_ERROR_COUNTERS is > 0; action "investigate"; detail
      {"counters": {name: value} of those > 0}.
    - "straggler": among the GPUs of one job that report DCGM_FI_PROF_SM_ACTIVE (wherever they
      are, over any number of nodes), a GPU whose SM activity is below straggler_ratio times the
      median of that job's values (statistics.median, the GPU itself included; exactly
      straggler_ratio times the median is not below); action "investigate"; detail
      {"sm_active": its value, "job_median": the median}. A job with fewer than 2 such GPUs
      has no straggler, nor have GPUs without a job.

    Returns the findings sorted by (node, gpu, kind); [] when nothing needs doing.

    Raises ValueError when: gpu_samples refuses the scrape; `pods` is not a list of dicts each
    with a string metadata.name and metadata.namespace; straggler_ratio is not a number with
    0 < straggler_ratio <= 1 (a bool is not a number here).
    """
    raise NotImplementedError("implement diagnose (lectures/15-orchestration.md, section 5)")


def alert_rules(straggler_ratio: float = 0.5, for_duration: str = "5m") -> str:
    """diagnose's checks as a Prometheus rules file (YAML text, what `rule_files` names), for a
    Prometheus that scrapes dcgm-exporter keeping its labels (honor_labels: true) and
    kube-state-metrics, whose series kube_pod_labels{namespace, pod,
    label_batch_kubernetes_io_job_name} carries each pod's Job label (value 1).

    One group (any name) with exactly these alerting rules, by `alert` name:

    - GpuXidRequiresDrain: DCGM_FI_DEV_XID_ERRORS equals a number of DRAIN_XIDS; no `for`;
      labels {severity: critical, action: drain}.
    - GpuXidRequiresReset: DCGM_FI_DEV_XID_ERRORS equals a number of RESET_XIDS; no `for`;
      labels {severity: warning, action: reset_gpu}.
    - GpuThermalThrottling: DCGM_FI_DEV_CLOCKS_EVENT_REASONS has bit 0x20 or 0x40 set (PromQL
      has no bitwise operators: floor and % do it); `for: <for_duration>`; labels {severity:
      warning, action: investigate}.
    - NvlinkErrors: one of the NVLINK_ERROR_COUNTERS increased in the last 5 minutes
      (increase(...[5m]) > 0); one alert per GPU however many counters rose; no `for`; labels
      {severity: warning, action: investigate}.
    - GpuStragglerInJob: DCGM_FI_PROF_SM_ACTIVE joined on (namespace, pod) to the kube_pod_labels
      series with a non-empty label_batch_kubernetes_io_job_name, below straggler_ratio times
      the median (quantile 0.5) of the SM activity of the GPUs of the same (namespace,
      label_batch_kubernetes_io_job_name); `for: <for_duration>`; labels {severity: warning,
      action: investigate}.

    Each alert's labels are then exactly: its GPU series' labels (the exporter's: Hostname, gpu,
    UUID, pod, ... as they come, the metric name dropped), the rule's labels above, `alertname`,
    and for GpuStragglerInJob also label_batch_kubernetes_io_job_name (and no other label of
    kube_pod_labels). Annotations are yours to write (the grader ignores them).

    Raises ValueError when: straggler_ratio is not a number with 0 < straggler_ratio <= 1 (a bool
    is not a number here); for_duration is not a Prometheus duration of one unit such as "30s",
    "5m" or "1h" (a whole number > 0, then ms, s, m, h, d, w or y).
    """
    raise NotImplementedError("implement alert_rules (lectures/15-orchestration.md, section 6)")
