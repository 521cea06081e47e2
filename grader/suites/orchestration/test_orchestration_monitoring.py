"""Hidden suite: monitoring.py. gpu_samples on scrapes of the given generator (a seeded fleet, with
and without # HELP / # TYPE lines, labels in any order, GPUs without a pod, other metrics, every
refusal); diagnose on scrapes whose answer the docstring fixes (every Xid of the tables and some
that are not, clock-event masks bit by bit, NVLink counters, stragglers of jobs spread over
nodes, ties at the threshold, medians of even counts, standalone pods, one job name in two
namespaces) and on the seeded fleet's injected faults; alert_rules run by Prometheus' own
`promtool test rules` on series this suite holds (skipped, saying why, where promtool is not
installed).
"""

from __future__ import annotations

import math
import random
import statistics

import pytest

from grader.models import dcgm_scrape as dcgm
from grader.suites.orchestration import monitoring_reference as ref
from grader.testing import RUN_SEED, expect_exception

WHERE_SAMPLES = "(see gpu_samples' docstring in monitoring.py)"
WHERE_DIAGNOSE = "(see diagnose's docstring in monitoring.py, and lecture 15, section 5)"
WHERE_RULES = ref.WHERE
SEED = random.Random(RUN_SEED).randrange(10**6)
XID = "DCGM_FI_DEV_XID_ERRORS"
REASONS = dcgm.CLOCKS_EVENT_REASONS
SM = "DCGM_FI_PROF_SM_ACTIVE"
DRAIN = {48, 64, 79, 95}
RESET = {63, 74, 94}


def expected_record(gpu: dcgm.Gpu) -> dict:
    return {
        "node": gpu.node, "gpu": gpu.index, "uuid": gpu.uuid, "model": gpu.model,
        "namespace": gpu.namespace, "pod": gpu.pod, "container": gpu.container,
        "metrics": {name: float(value) for name, value in gpu.values.items()},
    }  # fmt: skip


def compare_records(got, gpus: list[dcgm.Gpu], what: str) -> None:
    expected = [expected_record(g) for g in sorted(gpus, key=lambda g: (g.node, g.index))]
    assert isinstance(got, list), f"{what}: expected a list of records, got {type(got).__name__} {WHERE_SAMPLES}"
    where = [(r.get("node"), r.get("gpu")) if isinstance(r, dict) else r for r in got]
    want = [(r["node"], r["gpu"]) for r in expected]
    assert where == want, (
        f"{what}: expected one record per GPU sorted by (node, gpu):\n  {want}\ngot\n  {where} {WHERE_SAMPLES}"
    )
    problems = []
    for record, wanted in zip(got, expected):
        for key, value in wanted.items():
            if key == "metrics":
                mine = record.get("metrics") or {}
                if mine != value:
                    missing = sorted(set(value) - set(mine))[:3]
                    extra = sorted(set(mine) - set(value))[:3]
                    wrong = [(k, mine[k], value[k]) for k in value if k in mine and mine[k] != value[k]][:3]
                    problems.append(
                        f"GPU {wanted['gpu']} of {wanted['node']}: metrics differ: missing {missing}, unexpected "
                        f"{extra}, wrong values (name, got, expected) {wrong}"
                    )
            elif record.get(key) != value:
                problems.append(
                    f"GPU {wanted['gpu']} of {wanted['node']}: {key} expected {value!r}, got {record.get(key)!r}"
                )
    shown = "\n  ".join(problems[:6])
    assert not problems, f"{what}: {len(problems)} problem(s) {WHERE_SAMPLES}:\n  {shown}"


# ------------------------------------------------------------------ gpu_samples


@pytest.mark.points(2)
def test_gpu_samples_reads_every_gpu_of_a_fleet_with_its_pod_and_metrics(submission):
    fleet = dcgm.example_fleet(seed=SEED)
    got = submission.function("gpu_samples")(fleet.scrape)
    compare_records(got, fleet.gpus, f"the scrape of example_fleet(seed={SEED}) (3 nodes of 8 GPUs)")


@pytest.mark.points(2)
def test_counters_are_keyed_by_the_exporters_name_with_and_without_help_and_type_lines(submission):
    """The parser appends "_total" to the sample names of a family typed counter whose name does
    not end in lowercase _total: DCGM's counters (..._COUNT_TOTAL, ..._ENERGY_CONSUMPTION) do."""
    fleet = dcgm.example_fleet(seed=SEED + 1)
    for help_and_type in (True, False):
        text = dcgm.render(fleet.gpus, help_and_type=help_and_type)
        got = submission.function("gpu_samples")(text)
        compare_records(
            got, fleet.gpus, f"a scrape {'with' if help_and_type else 'without'} # HELP and # TYPE lines (counters "
            "such as DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION and DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL are keyed "
            "by the family's name, not by the parser's sample name with _total appended)",
        )  # fmt: skip


def test_label_order_and_line_order_do_not_matter(submission):
    fleet = dcgm.example_fleet(seed=SEED + 2)
    text = dcgm.render(fleet.gpus, help_and_type=False, shuffle_labels=True, seed=SEED)
    lines = text.splitlines()
    random.Random(SEED).shuffle(lines)
    got = submission.function("gpu_samples")("\n".join(lines) + "\n")
    compare_records(got, fleet.gpus, "a scrape whose labels come in a random order on every line, lines shuffled")


def test_gpus_without_a_pod_have_none_for_namespace_pod_and_container(submission):
    values = {"DCGM_FI_DEV_GPU_TEMP": 31.0, XID: 0.0}
    gpus = [ref.gpu("n1", 0, values, pod="train-0-abcde", namespace="ml"), ref.gpu("n1", 1, values)]
    text = dcgm.render(gpus)
    got = submission.function("gpu_samples")(text)
    compare_records(got, gpus, "GPU 1 has no pod labels at all")
    # Some exporter versions write the pod labels empty on a GPU no pod holds; modelName may be absent.
    empty = dcgm.render([gpus[1]]).replace('"} ', '",container="",namespace="",pod=""} ')
    got = submission.function("gpu_samples")(empty.replace('modelName="NVIDIA H100 80GB HBM3",', ""))
    want = [{**expected_record(gpus[1]), "model": None}]
    assert got == want, (
        f"a GPU whose container, namespace and pod labels are empty and that has no modelName: expected {want}, "
        f"got {got} {WHERE_SAMPLES}"
    )


def test_other_metrics_are_ignored_and_an_empty_scrape_gives_no_gpu(submission):
    gpus = [ref.gpu("n1", 0, {"DCGM_FI_DEV_GPU_TEMP": 40.0}), ref.gpu("n1", 1, {"DCGM_FI_DEV_GPU_TEMP": 41.0})]
    extra = (
        "# HELP go_goroutines Number of goroutines.\n# TYPE go_goroutines gauge\ngo_goroutines 42\n"
        "# TYPE DCGM_EXP_XID_ERRORS_COUNT gauge\n"
        'DCGM_EXP_XID_ERRORS_COUNT{gpu="0",UUID="x",Hostname="n1",xid="13"} 1\n'
        'DCGM_EXP_XID_ERRORS_COUNT{gpu="0",UUID="x",Hostname="n1",xid="31"} 2\n'
    )
    got = submission.function("gpu_samples")(extra + dcgm.render(gpus))
    compare_records(got, gpus, "a scrape with go_goroutines and DCGM_EXP_XID_ERRORS_COUNT (not DCGM_FI_ fields)")
    for text in ("", extra, "# HELP DCGM_FI_DEV_GPU_TEMP t\n# TYPE DCGM_FI_DEV_GPU_TEMP gauge\n"):
        got = submission.function("gpu_samples")(text)
        assert got == [], (
            f"a scrape with no DCGM_FI_ sample ({text[:60]!r}...): expected [], got {got!r} {WHERE_SAMPLES}"
        )


def _bad_scrapes() -> list[tuple[str, str]]:
    line = 'DCGM_FI_DEV_GPU_TEMP{{gpu="{gpu}",UUID="{uuid}",modelName="{model}",Hostname="n1"{pod}}} {value}\n'

    def one(gpu="0", uuid="GPU-a", model="M", pod="", value="40", name="DCGM_FI_DEV_GPU_TEMP"):
        return line.format(gpu=gpu, uuid=uuid, model=model, pod=pod, value=value).replace("DCGM_FI_DEV_GPU_TEMP", name)

    return [
        ("not the exposition format (a value that is not a number)", one(value="hot")),
        ("not the exposition format (an unquoted label value)",
         'DCGM_FI_DEV_GPU_TEMP{gpu=0,UUID="a",Hostname="n1"} 1\n'),
        ("no gpu label", 'DCGM_FI_DEV_GPU_TEMP{UUID="GPU-a",Hostname="n1"} 40\n'),
        ("no UUID label", 'DCGM_FI_DEV_GPU_TEMP{gpu="0",Hostname="n1"} 40\n'),
        ("no Hostname label", 'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-a"} 40\n'),
        ("a gpu label that is not a whole number", one(gpu="zero")),
        ("a negative gpu label", one(gpu="-1")),
        ("a pod label without a namespace", one(pod=',pod="train-0-abcde",container="trainer"')),
        ("two metrics of one GPU disagreeing on its UUID", one() + one(uuid="GPU-b", name="DCGM_FI_DEV_SM_CLOCK")),
        ("two metrics of one GPU disagreeing on its model", one() + one(model="N", name="DCGM_FI_DEV_SM_CLOCK")),
        ("two metrics of one GPU disagreeing on its pod",
         one(pod=',namespace="ml",pod="a"') + one(pod=',namespace="ml",pod="b"', name="DCGM_FI_DEV_SM_CLOCK")),
        ("one metric twice for one GPU (a GPU shared by two pods)",
         one(pod=',namespace="ml",pod="a"') + one(pod=',namespace="ml",pod="a"', value="41")),
    ]  # fmt: skip


def refusals(call, cases, where: str) -> None:
    """Every case must raise ValueError; the failures of all cases are reported together."""
    problems = []
    for case, *arguments in cases:
        try:
            expect_exception("ValueError", lambda arguments=arguments: call(*arguments))
        except AssertionError as error:
            problems.append(f"{case}: {' '.join(str(error).split())[:300]}")
    shown = "\n  ".join(problems)
    assert not problems, f"{len(problems)} of {len(cases)} bad inputs did not raise ValueError {where}:\n  {shown}"


@pytest.mark.points(2)
def test_bad_scrapes_raise_value_error(submission):
    """Each bad scrape raises ValueError."""
    refusals(submission.function("gpu_samples"), _bad_scrapes(), WHERE_SAMPLES)


# ------------------------------------------------------------------ diagnose


def run_diagnose(submission, gpus, pods, **kwargs):
    got = submission.function("diagnose")(dcgm.render(gpus), pods, **kwargs)
    assert isinstance(got, list), f"diagnose must return a list of findings, got {type(got).__name__} {WHERE_DIAGNOSE}"
    return got


def summary(findings, *keys) -> list[tuple]:
    return [tuple(f.get(k) for k in ("node", "gpu", "kind", *keys)) for f in findings]


def busy(sm: float = 0.875, **more) -> dict[str, float]:
    return {SM: sm, XID: 0.0, REASONS: 0x4, **more}


@pytest.mark.points(2)
def test_drain_and_reset_xids_are_findings_and_application_xids_are_not(submission):
    codes = [0, 13, 31, 43, 45, 48, 63, 64, 74, 79, 94, 95, 119, 999]
    gpus, pods = [], []
    for i, code in enumerate(codes):
        node, index = f"n{i // 8 + 1}", i % 8
        pod = f"train-{node}-xyz12"
        if index == 0:
            pods.append(dcgm.pod_manifest(pod, "ml", node, 8, job="train"))
        gpus.append(ref.gpu(node, index, busy(**{XID: float(code)}), pod=pod, namespace="ml"))
    got = run_diagnose(submission, gpus, pods)
    want = [
        (g.node, g.index, "xid", "drain" if int(g.values[XID]) in DRAIN else "reset_gpu", {"xid": int(g.values[XID])})
        for g in gpus if int(g.values[XID]) in DRAIN | RESET
    ]  # fmt: skip
    assert summary(got, "action", "detail") == want, (
        f"one GPU per Xid {codes} (all in pods of job 'train'): expected findings (node, gpu, kind, action, detail)\n"
        f"  {want}\ngot\n  {summary(got, 'action', 'detail')}\nDRAIN_XIDS {sorted(DRAIN)} drain, RESET_XIDS "
        f"{sorted(RESET)} reset_gpu, any other Xid (13, 31, 43, 45: the application's own error) is no finding "
        f"{WHERE_DIAGNOSE}"
    )
    assert all(f.get("job") == "train" and f.get("namespace") == "ml" for f in got), (
        "every finding must name the GPU's namespace 'ml' and job 'train': got "
        f"{[(f.get('namespace'), f.get('job')) for f in got]}"
    )


MASKS = [
    (0x0, []), (0x1, []), (0x4, []), (0x2 | 0x10 | 0x100, []),
    (0x8, ["hw_slowdown"]), (0x20, ["sw_thermal_slowdown"]), (0x44, ["sw_power_cap", "hw_thermal_slowdown"]),
    (0x80, ["hw_power_brake_slowdown"]), (0x48, ["hw_slowdown", "hw_thermal_slowdown"]),
    (0x1FF, ["gpu_idle", "applications_clocks_setting", "sw_power_cap", "hw_slowdown", "sync_boost",
             "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown", "display_clock_setting"]),
    (0x200 | 0x40, ["hw_thermal_slowdown"]),
]  # fmt: skip


@pytest.mark.points(2)
def test_throttling_reasons_are_decoded_from_the_clock_event_bits(submission):
    gpus = [ref.gpu("n1", i, busy(**{REASONS: float(mask)}), pod="p-0-aaaaa", namespace="ml") for i, (mask, _) in
            enumerate(MASKS[:8])] + [ref.gpu("n2", i, busy(**{REASONS: float(mask)}), pod="p-1-bbbbb", namespace="ml")
                                     for i, (mask, _) in enumerate(MASKS[8:])]  # fmt: skip
    # The field's name before DCGM 3.3, and both names at once (the current one wins).
    old = busy()
    old.pop(REASONS)
    gpus.append(ref.gpu("n2", 5, {**old, dcgm.OLD_CLOCKS_EVENT_REASONS: float(0x40)}, pod="p-1-bbbbb", namespace="ml"))
    gpus.append(ref.gpu("n2", 6, {**old, REASONS: 4.0, dcgm.OLD_CLOCKS_EVENT_REASONS: 64.0}, pod="p-1-bbbbb",
                        namespace="ml"))  # fmt: skip
    pods = [dcgm.pod_manifest("p-0-aaaaa", "ml", "n1", 8, "p"), dcgm.pod_manifest("p-1-bbbbb", "ml", "n2", 8, "p")]
    got = run_diagnose(submission, gpus, pods)
    want = [
        (g.node, g.index, "throttling", "investigate", {"reasons": reasons})
        for g, (_, reasons) in zip(gpus, MASKS)
        if reasons
        and set(reasons)
        - {"gpu_idle", "applications_clocks_setting", "sw_power_cap", "sync_boost", "display_clock_setting"}
    ]
    want.append(("n2", 5, "throttling", "investigate", {"reasons": ["hw_thermal_slowdown"]}))  # fmt: skip
    masks = [f"{g.node}/{g.index}: {hex(int(g.values.get(REASONS, g.values.get(dcgm.OLD_CLOCKS_EVENT_REASONS, 0))))}"
             for g in gpus]  # fmt: skip
    assert summary(got, "action", "detail") == want, (
        f"clock-event masks {masks} (n2/5 reports only DCGM_FI_DEV_CLOCK_THROTTLE_REASONS = 0x40, n2/6 both names, the "
        f"current one 0x4): expected\n  {want}\ngot\n  {summary(got, 'action', 'detail')}\nthrottling = a bit of "
        f"0x8 | 0x20 | 0x40 | 0x80; reasons = every defined bit set, in increasing bit order {WHERE_DIAGNOSE}"
    )


def test_nvlink_error_counters_above_zero_are_reported(submission):
    crc = "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL"
    everything = {name: float(i + 1) for i, name in enumerate(dcgm.NVLINK_ERROR_COUNTERS)}
    gpus = [
        ref.gpu("n1", 0, busy(**{crc: 3.0})),
        ref.gpu("n1", 1, busy(**everything)),
        ref.gpu("n1", 2, busy(**{name: 0.0 for name in dcgm.NVLINK_ERROR_COUNTERS})),
        ref.gpu("n1", 3, busy(DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL=8.5e12)),  # traffic, not errors
        ref.gpu("n1", 4, busy(**{"DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL": 1.0})),
    ]
    got = run_diagnose(submission, gpus, [])
    want = [
        ("n1", 0, "nvlink_errors", "investigate", {"counters": {crc: 3.0}}),
        ("n1", 1, "nvlink_errors", "investigate", {"counters": everything}),
        ("n1", 4, "nvlink_errors", "investigate", {"counters": {"DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL": 1.0}}),
    ]
    assert summary(got, "action", "detail") == want, (
        f"NVLink counters: GPU 0 one CRC error, GPU 1 every counter > 0, GPU 2 all zero, GPU 3 only bandwidth, GPU 4 "
        f"one recovery: expected\n  {want}\ngot\n  {summary(got, 'action', 'detail')} {WHERE_DIAGNOSE}"
    )


def _straggler_fleet() -> tuple[list[dcgm.Gpu], list[dict], list[tuple]]:
    """Jobs whose stragglers the docstring fixes; returns (gpus, pods, expected (node, gpu, job, median))."""
    gpus, pods, want = [], [], []
    node_of = iter(f"node-{n:02d}" for n in range(1, 100))

    def job(namespace: str, name: str | None, per_pod: list[list[float | None]], listed: bool = True) -> list:
        placed = []
        for index, values in enumerate(per_pod):
            node = next(node_of)
            pod = f"{name or 'standalone'}-{index}-q{index}x9z"
            if listed:
                pods.append(dcgm.pod_manifest(pod, namespace, node, len(values), name))
            for i, sm in enumerate(values):
                g = ref.gpu(node, i, busy() if sm is None else busy(sm), pod=pod, namespace=namespace)
                if sm is None:
                    g.values.pop(SM)
                gpus.append(g)
                placed.append(g)
        return placed

    def expect(placed: list, ratio: float = 0.5) -> None:
        values = [g.values[SM] for g in placed if SM in g.values]
        median = statistics.median(values)
        want.extend((g.node, g.index, g.values[SM], median) for g in placed
                    if SM in g.values and len(values) >= 2 and g.values[SM] < ratio * median)  # fmt: skip

    # One whole pod (a node) of a 3-node job far behind: the median is the job's, not the pod's.
    expect(job("research", "llama", [[0.3] * 4, [0.9] * 4, [0.9] * 4]))
    # A tie: 0.25 is exactly 0.5 x median(0.25, 0.5, 0.75): not below it.
    expect(job("research", "tie", [[0.25, 0.5, 0.75]]))
    # An even count: the median of 4 values is the mean of the middle two (0.625; threshold 0.3125).
    expect(job("research", "even", [[0.28125, 0.5], [0.75, 1.0]]))
    # An outlier that drags the mean down: the median (0.875) still flags 0.375.
    expect(job("research", "skewed", [[0.0, 0.375, 0.875, 0.875, 0.875]]))
    # Every GPU idle (median 0), one GPU, one GPU that does not report SM activity.
    expect(job("research", "idle", [[0.0, 0.0]]))
    expect(job("research", "solo", [[0.0]]))
    expect(job("research", "partial", [[None, 0.0625], [0.875]]))
    # One job name in two namespaces: two jobs, each even.
    expect(job("team-a", "sweep", [[0.875, 0.875]]))
    expect(job("team-b", "sweep", [[0.125, 0.125]]))
    # Pods of no Job, and a pod missing from `pods` (job None): no straggler among them.
    job("dev", None, [[0.0], [0.9]])
    job("research", "unlisted", [[0.0, 0.9, 0.9]], listed=False)
    gpus.append(ref.gpu("node-99", 0, busy(0.0)))  # no pod at all
    want.sort()
    return gpus, pods, want


@pytest.mark.points(3)
def test_a_gpu_far_below_its_jobs_median_is_a_straggler(submission):
    gpus, pods, want = _straggler_fleet()
    got = run_diagnose(submission, gpus, pods)
    mine = [(f["node"], f["gpu"], f.get("detail", {}).get("sm_active"), f.get("detail", {}).get("job_median"))
            for f in got if f.get("kind") == "straggler"]  # fmt: skip
    ok = len(mine) == len(want) and all(
        m[:3] == w[:3] and isinstance(m[3], float) and math.isclose(m[3], w[3], rel_tol=1e-9)
        for m, w in zip(mine, want)
    )
    assert ok, (
        "jobs: llama (pods of 4 GPUs on 3 nodes, one pod at 0.3, the rest 0.9), tie [0.25, 0.5, 0.75], even [0.28125, "
        "0.5, 0.75, 1.0], skewed [0, 0.375, 0.875 x3], idle [0, 0], solo [0], partial [no SM metric, 0.0625, 0.875], "
        "sweep in team-a [0.875 x2] and in team-b [0.125 x2], standalone pods, an unlisted pod, a GPU without a pod.\n"
        f"expected stragglers (node, gpu, sm_active, job_median)\n  {want}\ngot\n  {mine}\nstraggler = below "
        f"straggler_ratio x statistics.median of its job's SM activity, a job being (namespace, job label) "
        f"{WHERE_DIAGNOSE}"
    )
    assert all(f.get("action") == "investigate" for f in got if f.get("kind") == "straggler"), (
        f"a straggler's action is 'investigate': got {[f.get('action') for f in got if f.get('kind') == 'straggler']}"
    )
    assert [f.get("kind") for f in got if f.get("kind") != "straggler"] == [], (
        f"these GPUs have no Xid, no throttling bit and no NVLink error: expected only stragglers, got "
        f"{summary([f for f in got if f.get('kind') != 'straggler'])} {WHERE_DIAGNOSE}"
    )
    # straggler_ratio is honoured: at 0.75, the tie's 0.25 (< 0.375) is one, its 0.5 is not.
    got = run_diagnose(submission, gpus, pods, straggler_ratio=0.75)
    tie = sorted((f["node"], f["gpu"]) for f in got if f.get("kind") == "straggler" and f.get("job") == "tie")
    tie_node = next(g.node for g in gpus if g.pod and g.pod.startswith("tie-"))
    assert tie == [(tie_node, 0)], (
        f"straggler_ratio=0.75, job tie [0.25, 0.5, 0.75] (median 0.5): expected GPU 0 of {tie_node} only, got {tie} "
        f"{WHERE_DIAGNOSE}"
    )


@pytest.mark.points(2)
def test_findings_name_the_pod_and_job_and_come_sorted(submission):
    fleet = dcgm.example_fleet(seed=SEED + 3)
    got = submission.function("diagnose")(fleet.scrape, fleet.pods)
    by_key = {(g.node, g.index): g for g in fleet.gpus}
    job_of = {(p["metadata"]["namespace"], p["metadata"]["name"]): p["metadata"]["labels"].get(dcgm.JOB_NAME_LABEL)
              for p in fleet.pods}  # fmt: skip
    llama = [g.values[SM] for g in fleet.gpus if g.pod and g.pod.startswith("llama") and SM in g.values]
    want = []
    for fault in fleet.faults:
        g = by_key[fault["node"], fault["gpu"]]
        detail = dict(fault["detail"])
        if fault["kind"] == "straggler":
            detail["job_median"] = statistics.median(llama)
        action = {"xid": "drain"}.get(fault["kind"], "investigate")
        want.append({"node": g.node, "gpu": g.index, "uuid": g.uuid, "namespace": g.namespace, "pod": g.pod,
                     "job": job_of[g.namespace, g.pod], "kind": fault["kind"], "action": action,
                     "detail": detail})  # fmt: skip
    assert isinstance(got, list) and len(got) == len(want) and all(
        isinstance(f, dict) and set(f) == set(w) and all(
            (math.isclose(f[k]["job_median"], w[k]["job_median"], rel_tol=1e-9)
             and f[k]["sm_active"] == w[k]["sm_active"]) if k == "detail" and w["kind"] == "straggler" else f[k] == w[k]
            for k in w)
        for f, w in zip(got, want)
    ), (
        f"example_fleet(seed={SEED + 3}) with Xid 79, a straggler, thermal throttling and NVLink errors injected (and "
        f"an Xid 13 and power-capped GPUs that need nothing): expected, sorted by (node, gpu, kind),\n  "
        + "\n  ".join(map(str, want)) + "\ngot\n  " + "\n  ".join(map(str, got if isinstance(got, list) else [got]))
        + f"\n{WHERE_DIAGNOSE}"
    )  # fmt: skip
    # Unknown pods: the scrape's pods missing from `pods` give job None, and the findings stay.
    got = submission.function("diagnose")(fleet.scrape, [])
    assert [(f.get("node"), f.get("gpu"), f.get("kind"), f.get("job")) for f in got] == [
        (w["node"], w["gpu"], w["kind"], None) for w in want if w["kind"] != "straggler"
    ], (
        f"with pods = [] no GPU has a job (job None), so there is no straggler, and the other findings stay: got "
        f"{[(f.get('node'), f.get('gpu'), f.get('kind'), f.get('job')) for f in got]} {WHERE_DIAGNOSE}"
    )


def _bad_diagnose_calls():
    scrape = dcgm.render([ref.gpu("n1", 0, busy())])
    pod = dcgm.pod_manifest("a", "ml", "n1", 1, "a")
    return [
        ("straggler_ratio = 0", (scrape, [pod]), {"straggler_ratio": 0}),
        ("straggler_ratio = 1.5", (scrape, [pod]), {"straggler_ratio": 1.5}),
        ("straggler_ratio = -0.5", (scrape, [pod]), {"straggler_ratio": -0.5}),
        ("straggler_ratio = True", (scrape, [pod]), {"straggler_ratio": True}),
        ("straggler_ratio = '0.5'", (scrape, [pod]), {"straggler_ratio": "0.5"}),
        ("pods is a dict, not a list", (scrape, {"items": [pod]}), {}),
        ("a pod without metadata", (scrape, [{"spec": {}}]), {}),
        ("a pod without metadata.namespace", (scrape, [{"metadata": {"name": "a"}}]), {}),
        ("a pod whose name is not a string", (scrape, [{"metadata": {"name": 3, "namespace": "ml"}}]), {}),
        ("a pod that is a string", (scrape, ["ml/a"]), {}),
        ("a scrape gpu_samples refuses", ('DCGM_FI_DEV_GPU_TEMP{gpu="0",Hostname="n1"} 40\n', [pod]), {}),
    ]


def test_bad_diagnose_arguments_raise_value_error(submission):
    """Each bad argument raises ValueError."""
    diagnose = submission.function("diagnose")
    refusals(lambda args, kwargs: diagnose(*args, **kwargs), _bad_diagnose_calls(), WHERE_DIAGNOSE)


# ------------------------------------------------------------------ alert_rules under promtool

DCGM_LABELS = {"Hostname": "n1", "UUID": "GPU-0", "modelName": "NVIDIA H100 80GB HBM3", "job": "dcgm-exporter",
               "instance": "10.0.3.7:9400"}  # fmt: skip
RULE_LABELS = {
    "GpuXidRequiresDrain": {"severity": "critical", "action": "drain"},
    "GpuXidRequiresReset": {"severity": "warning", "action": "reset_gpu"},
    "GpuThermalThrottling": {"severity": "warning", "action": "investigate"},
    "NvlinkErrors": {"severity": "warning", "action": "investigate"},
    "GpuStragglerInJob": {"severity": "warning", "action": "investigate"},
}


def gpu_labels(node: str, index: int, pod: str | None = None, namespace: str | None = None) -> dict[str, str]:
    labels = {**DCGM_LABELS, "Hostname": node, "gpu": str(index), "UUID": f"GPU-{node}-{index}"}
    if pod is not None:
        labels |= {"container": "trainer", "namespace": namespace, "pod": pod}
    return labels


def alert(name: str, labels: dict[str, str], **more: str) -> dict:
    return {"exp_labels": {**labels, **more, **RULE_LABELS[name]}}


def student_rules(submission, *args) -> dict:
    text = submission.function("alert_rules")(*args)
    ref.promtool()  # skip before judging when the tool is missing
    document, why = ref.rules_for_promtool(text)
    assert document is not None, f"{why} {WHERE_RULES}"
    return document


def promtool_passes(submission, what: str, input_series, checks, *args) -> None:
    report = ref.run_promtool(student_rules(submission, *args), input_series, checks)
    assert not report, (
        f"promtool test rules on {what}: the alerts differ from the expected ones (exp: expected, got: yours; labels "
        f"compared exactly, annotations removed) {WHERE_RULES}\n{report}"
    )


def test_alert_rules_are_a_valid_rules_file_with_the_five_alerts(submission):
    document = student_rules(submission)
    problems = ref.check_rules(document)
    assert not problems, f"promtool check rules refuses the rules file {WHERE_RULES}:\n{problems}"
    names = sorted(ref.alert_names(document))
    assert names == sorted(RULE_LABELS), f"expected exactly the alerts {sorted(RULE_LABELS)}, got {names} {WHERE_RULES}"


@pytest.mark.points(2)
def test_xid_alerts_fire_for_the_drain_and_reset_tables_only(submission):
    codes = [13, 31, 43, 45, 48, 63, 64, 74, 79, 94, 95, 119]
    input_series, drain, reset = [], [], []
    for i, code in enumerate(codes):
        # GPUs of a pod, and (the last two) GPUs no pod holds.
        labels = gpu_labels("n1", i, *(("train-0-abcde", "ml") if i < len(codes) - 2 else ()))
        input_series.append(ref.series(XID, labels, f"0 0 {code} {code} {code}"))
        if code in DRAIN:
            drain.append(alert("GpuXidRequiresDrain", labels))
        if code in RESET:
            reset.append(alert("GpuXidRequiresReset", labels))
    checks = [
        {"eval_time": "1m", "alertname": "GpuXidRequiresDrain", "exp_alerts": []},
        {"eval_time": "1m", "alertname": "GpuXidRequiresReset", "exp_alerts": []},
        {"eval_time": "3m", "alertname": "GpuXidRequiresDrain", "exp_alerts": drain},
        {"eval_time": "3m", "alertname": "GpuXidRequiresReset", "exp_alerts": reset},
    ]
    promtool_passes(submission, f"one GPU per Xid {codes}, each from minute 2", input_series, checks)


def thermal_series_and_alerts(start_of_late: int) -> tuple[list, list, list]:
    masks = [0x20, 0x40 | 0x8, 0x24, 0x1FF, 0x80, 0x88, 0x4, 0x1, 0x100, 0x10, 0x2, 0x0]
    input_series, firing = [], []
    for i, mask in enumerate(masks):
        labels = gpu_labels("n2", i, "train-1-fghij", "ml")
        input_series.append(ref.series(REASONS, labels, f"{mask}x15"))
        if mask & 0x60:
            firing.append(alert("GpuThermalThrottling", labels))
    late = gpu_labels("n2", len(masks), "train-1-fghij", "ml")
    input_series.append(ref.series(REASONS, late, f"4x{start_of_late - 1} 64x{15 - start_of_late}"))
    return input_series, firing, [alert("GpuThermalThrottling", late)]


@pytest.mark.points(2)
def test_thermal_throttling_alert_reads_bits_0x20_and_0x40_and_waits_for_its_duration(submission):
    input_series, firing, late = thermal_series_and_alerts(start_of_late=3)
    checks = [
        {"eval_time": "4m", "alertname": "GpuThermalThrottling", "exp_alerts": []},  # pending for 5m
        {"eval_time": "5m", "alertname": "GpuThermalThrottling", "exp_alerts": firing},
        {"eval_time": "7m", "alertname": "GpuThermalThrottling", "exp_alerts": firing},  # the late GPU is pending
        {"eval_time": "8m", "alertname": "GpuThermalThrottling", "exp_alerts": firing + late},
    ]
    promtool_passes(
        submission, "masks 0x20, 0x48, 0x24, 0x1ff (firing after 5m) and 0x80, 0x88, 0x4, 0x1, 0x100, 0x10, 0x2, "
        "0 (never), and a GPU at 0x40 from minute 3 (firing at 8m)", input_series, checks,
    )  # fmt: skip


@pytest.mark.points(2)
def test_nvlink_alert_fires_once_per_gpu_while_a_counter_rises(submission):
    flit, data, replay, recovery = dcgm.NVLINK_ERROR_COUNTERS
    a, b, c, d = (gpu_labels("n3", i, "train-2-klmno", "ml") for i in range(4))
    e = gpu_labels("n3", 4)  # no pod
    input_series = [
        ref.series(flit, a, "0 0 0 5 5 5 5 5 5 5 5 5 5 5 5 5"),
        ref.series(data, b, "0 0 0 0 2 2 2 2 2 2 2 2 2 2 2 2"),
        ref.series(replay, b, "0 0 0 0 9 9 9 9 9 9 9 9 9 9 9 9"),
        ref.series(recovery, c, "1 1 1 1 1 1 1 1 1 1 3 3 3 3 3 3"),
        ref.series(flit, d, "7 7 7 7 7 7 7 7 7 7 7 7 7 7 7 7"),  # errors long ago, none now
        ref.series(replay, e, "0 0 0 0 4 4 4 4 4 4 4 4 4 4 4 4"),
        ref.series("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", d, "0+1000x15"),  # traffic, not errors
    ]  # fmt: skip
    checks = [
        {"eval_time": "2m", "alertname": "NvlinkErrors", "exp_alerts": []},
        {"eval_time": "5m", "alertname": "NvlinkErrors",
         "exp_alerts": [alert("NvlinkErrors", a), alert("NvlinkErrors", b), alert("NvlinkErrors", e)]},
        {"eval_time": "12m", "alertname": "NvlinkErrors", "exp_alerts": [alert("NvlinkErrors", c)]},
    ]  # fmt: skip
    promtool_passes(
        submission, "NVLink counters rising on GPUs 0 (CRC flit, minute 3), 1 (CRC data and replay, minute 4: one "
        "alert), 2 (recovery, minute 10), 4 (replay, no pod), flat on GPU 3 (7 errors long ago)", input_series, checks,
    )  # fmt: skip


def straggler_series(ratio: float) -> tuple[list, list]:
    """SM activity of jobs over nodes, their kube_pod_labels, and the alerts at `ratio` (values are
    dyadic fractions, so that a tie is a tie in floating point)."""
    input_series, alerts = [], []
    jobs = [  # (namespace, job, pods as lists of SM activity)
        ("research", "llama", [[0.375, 0.875, 0.875, 0.875], [0.875, 0.875, 0.875, 0.875]]),  # median 0.875
        ("research", "tie", [[0.25, 0.5, 0.75]]),  # 0.25 is exactly 0.5 x 0.5
        ("research", "skewed", [[0.0, 0.375, 0.875, 0.875, 0.875]]),  # median 0.875, mean 0.6
        ("team-a", "sweep", [[0.875, 0.875]]),
        ("team-b", "sweep", [[0.125, 0.125]]),  # the same name in another namespace: another job
        ("dev", "", [[0.0625], [0.875]]),  # pods of no Job
    ]
    node = 0
    for namespace, job, pods in jobs:
        values = sorted(v for pod in pods for v in pod)
        median = statistics.median(values)
        for index, sms in enumerate(pods):
            node += 1
            pod = f"{job or 'notebook'}-{index}-p{node}qz"
            input_series.append(ref.series("kube_pod_labels", {
                "namespace": namespace, "pod": pod, "uid": f"uid-{node}", "job": "kube-state-metrics",
                "instance": "10.0.9.1:8080", "label_batch_kubernetes_io_job_name": job}, "1x15"))  # fmt: skip
            for i, sm in enumerate(sms):
                labels = gpu_labels(f"node-{node}", i, pod, namespace)
                input_series.append(ref.series(SM, labels, f"{sm}x15"))
                if job and sm < ratio * median:
                    alerts.append(alert("GpuStragglerInJob", labels, label_batch_kubernetes_io_job_name=job))
    input_series.append(ref.series(SM, gpu_labels("node-99", 0), "0x15"))  # a GPU no pod holds
    return input_series, alerts


@pytest.mark.points(3)
def test_straggler_alert_compares_each_gpu_with_its_jobs_median(submission):
    input_series, alerts = straggler_series(0.5)
    checks = [
        {"eval_time": "4m", "alertname": "GpuStragglerInJob", "exp_alerts": []},
        {"eval_time": "5m", "alertname": "GpuStragglerInJob", "exp_alerts": alerts},
    ]
    promtool_passes(
        submission, "job llama over 2 nodes (one GPU at 0.375, median 0.875: 0.375 < 0.4375), job tie "
        "[0.25, 0.5, 0.75] (0.25 is not below 0.5 x 0.5), job skewed [0, 0.375, 0.875 x3] (median 0.875, not "
        "the mean), job sweep in team-a at 0.875 and in team-b at 0.125 (two jobs, each even), two "
        "pods of no Job at 0.0625 and 0.875 (label_batch_kubernetes_io_job_name empty: no job), a GPU without a pod",
        input_series, checks,
    )  # fmt: skip


@pytest.mark.points(2)
def test_alert_rules_follow_their_arguments(submission):
    input_series, alerts = straggler_series(0.75)
    thermal, firing, late = thermal_series_and_alerts(start_of_late=3)
    checks = [
        {"eval_time": "2m", "alertname": "GpuStragglerInJob", "exp_alerts": []},
        {"eval_time": "3m", "alertname": "GpuStragglerInJob", "exp_alerts": alerts},
        {"eval_time": "2m", "alertname": "GpuThermalThrottling", "exp_alerts": []},
        {"eval_time": "3m", "alertname": "GpuThermalThrottling", "exp_alerts": firing},
        {"eval_time": "6m", "alertname": "GpuThermalThrottling", "exp_alerts": firing + late},
    ]
    promtool_passes(
        submission, "alert_rules(straggler_ratio=0.75, for_duration='3m'): the tie's 0.25 is now a straggler (< 0.375) "
        "and both pending alerts fire after 3 minutes", input_series + thermal, checks, 0.75, "3m",
    )  # fmt: skip


@pytest.mark.points(1)
def test_a_straggler_ratio_of_one_is_accepted_and_flags_gpus_below_their_jobs_median(submission):
    # 1 is the top of the allowed range (0, 1]: the alert then fires on every GPU strictly below its
    # job's median, and not on one at the median (the tie's 0.5). Given as the int 1: a number too.
    input_series, alerts = straggler_series(1)
    checks = [
        {"eval_time": "1m", "alertname": "GpuStragglerInJob", "exp_alerts": []},
        {"eval_time": "2m", "alertname": "GpuStragglerInJob", "exp_alerts": alerts},
    ]
    promtool_passes(
        submission, "alert_rules(straggler_ratio=1, for_duration='2m'): every GPU below its job's median is a "
        "straggler (the tie's 0.25, llama's 0.375, skewed's 0 and 0.375), none at its median",
        input_series, checks, 1, "2m",
    )  # fmt: skip


BAD_RULE_ARGUMENTS = [
    ("straggler_ratio = 0", (0, "5m")), ("straggler_ratio = 1.25", (1.25, "5m")),
    ("straggler_ratio = True", (True, "5m")),
    ("for_duration = '5'", (0.5, "5")), ("for_duration = '5 m'", (0.5, "5 m")), ("for_duration = '0m'", (0.5, "0m")),
    ("for_duration = 300", (0.5, 300)), ("for_duration = '-5m'", (0.5, "-5m")),
]  # fmt: skip


def test_bad_alert_rule_arguments_raise_value_error(submission):
    """Each bad argument raises ValueError."""
    alert_rules = submission.function("alert_rules")
    refusals(lambda args: alert_rules(*args), BAD_RULE_ARGUMENTS, WHERE_RULES)
