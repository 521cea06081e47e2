"""diagnose drains the node on every non-zero Xid, Xid 13 and 31 (an application's own errors)
included, and never asks for a GPU reset."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: monitoring.py
# select: xids_are_findings
# fails: test_drain_and_reset_xids_are_findings_and_application_xids_are_not
# kind:
# message: any other Xid \(13, 31, 43, 45: the application's own error\) is no finding

_diagnose_as_given = diagnose


def diagnose(scrape, pods, straggler_ratio=0.5):
    findings = [f for f in _diagnose_as_given(scrape, pods, straggler_ratio) if f["kind"] != "xid"]
    for record in gpu_samples(scrape):
        xid = int(record["metrics"].get("DCGM_FI_DEV_XID_ERRORS", 0))
        if xid:
            job = None
            for pod in pods:
                if (pod["metadata"]["namespace"], pod["metadata"]["name"]) == (record["namespace"], record["pod"]):
                    job = pod["metadata"].get("labels", {}).get(JOB_NAME_LABEL)
            findings.append({
                "node": record["node"], "gpu": record["gpu"], "uuid": record["uuid"], "namespace": record["namespace"],
                "pod": record["pod"], "job": job, "kind": "xid", "action": "drain", "detail": {"xid": xid},
            })  # fmt: skip
    return sorted(findings, key=lambda f: (f["node"], f["gpu"], f["kind"]))
