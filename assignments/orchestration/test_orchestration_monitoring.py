"""Public tests for monitoring.py (GPU monitoring): run them while you work with

    pytest assignments/orchestration/test_orchestration_monitoring.py

Your functions run in a worker process, never inside pytest. The scrapes come from
grader.models.dcgm_scrape (read its docstring): a fleet of 3 nodes of 8 H100s with faults
injected. The hidden suite also reads scrapes without # HELP / # TYPE lines and with labels in
any order, checks every Xid of the tables, clock-event masks bit by bit, stragglers of jobs
spread over nodes (ties, medians of even counts, one job name in two namespaces), every refusal,
and runs your alerting rules with Prometheus' own `promtool test rules` on series it holds
(install promtool, Debian's `prometheus` package, to run the last test here).
"""

from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml

from grader.models.dcgm_scrape import Gpu, example_fleet, pod_manifest, render


def test_gpu_samples_reads_the_gpus_of_a_small_scrape(submission):
    gpus = [
        Gpu("node-a", 0, "GPU-0000", {"DCGM_FI_DEV_GPU_TEMP": 64.0, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": 9.5e11},
            pod="train-0-abcde", namespace="ml", container="trainer"),
        Gpu("node-a", 1, "GPU-1111", {"DCGM_FI_DEV_GPU_TEMP": 31.0, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": 2.0e9}),
    ]  # fmt: skip
    got = submission.function("gpu_samples")(render(gpus))
    assert [(r["node"], r["gpu"], r["uuid"], r["pod"], r["namespace"]) for r in got] == [
        ("node-a", 0, "GPU-0000", "train-0-abcde", "ml"),
        ("node-a", 1, "GPU-1111", None, None),  # no pod holds GPU 1
    ]
    # A counter is keyed by the name the exporter wrote (the parser appends _total to its samples).
    assert got[0]["metrics"] == {"DCGM_FI_DEV_GPU_TEMP": 64.0, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": 9.5e11}


def test_gpu_samples_refuses_a_sample_without_a_gpu_label(submission):
    from grader.testing import expect_exception

    text = 'DCGM_FI_DEV_GPU_TEMP{UUID="GPU-0000",Hostname="node-a"} 64\n'
    expect_exception("ValueError", lambda: submission.function("gpu_samples")(text))


def test_diagnose_finds_the_faults_injected_in_the_example_fleet(submission):
    fleet = example_fleet(seed=0)
    got = submission.function("diagnose")(fleet.scrape, fleet.pods)
    assert [(f["node"], f["gpu"], f["kind"]) for f in got] == [(f["node"], f["gpu"], f["kind"]) for f in fleet.faults]
    fallen = next(f for f in got if f["kind"] == "xid")
    assert (fallen["action"], fallen["detail"], fallen["job"]) == ("drain", {"xid": 79}, "llama-pretrain")


def test_a_job_of_two_gpus_one_of_them_idle_has_a_straggler(submission):
    sm = "DCGM_FI_PROF_SM_ACTIVE"
    gpus = [Gpu("node-a", 0, "GPU-0000", {sm: 0.9}, pod="job-0-abcde", namespace="ml", container="trainer"),
            Gpu("node-b", 0, "GPU-1111", {sm: 0.05}, pod="job-1-fghij", namespace="ml", container="trainer")]  # fmt: skip
    pods = [pod_manifest("job-0-abcde", "ml", "node-a", 1, job="job"), pod_manifest("job-1-fghij", "ml", "node-b", 1, job="job")]
    got = submission.function("diagnose")(render(gpus), pods)
    assert [(f["node"], f["kind"], f["job"]) for f in got] == [("node-b", "straggler", "job")]
    assert got[0]["detail"]["job_median"] == pytest.approx(0.475)


def test_alert_rules_are_a_rules_file_with_the_five_alerts(submission):
    text = submission.function("alert_rules")()
    rules = [rule for group in yaml.safe_load(text)["groups"] for rule in group["rules"]]
    assert sorted(rule["alert"] for rule in rules) == [
        "GpuStragglerInJob", "GpuThermalThrottling", "GpuXidRequiresDrain", "GpuXidRequiresReset", "NvlinkErrors",
    ]  # fmt: skip
    thermal = next(rule for rule in rules if rule["alert"] == "GpuThermalThrottling")
    assert thermal["for"] == "5m"


def test_promtool_accepts_the_rules(submission, tmp_path):
    if shutil.which("promtool") is None:
        pytest.skip("promtool is not installed (Debian's or Ubuntu's `prometheus` package has it)")
    (tmp_path / "rules.yml").write_text(submission.function("alert_rules")())
    done = subprocess.run(["promtool", "check", "rules", "rules.yml"], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
