"""gpu_samples keys each metric by the parser's sample name: with # TYPE lines, every DCGM counter
comes back as <name>_total, so NVLink error counters are never found."""

# ruff: noqa: E501, F821 - a fragment appended to a solution file, whose names are in scope
# target: monitoring.py
# select: counters_are_keyed_by or nvlink_error_counters_above_zero
# fails: test_counters_are_keyed_by_the_exporters_name_with_and_without_help_and_type_lines|test_nvlink_error_counters_above_zero_are_reported
# kind:
# message: keyed by the family's name


def gpu_samples(scrape):
    gpus = {}
    for family in text_string_to_metric_families(scrape):
        if not family.name.startswith("DCGM_FI_"):
            continue
        for sample in family.samples:
            labels = sample.labels
            key = (labels["Hostname"], int(labels["gpu"]))
            record = gpus.setdefault(key, {
                "node": key[0], "gpu": key[1], "uuid": labels["UUID"], "model": labels.get("modelName") or None,
                "namespace": labels.get("namespace") or None, "pod": labels.get("pod") or None,
                "container": labels.get("container") or None, "metrics": {},
            })  # fmt: skip
            record["metrics"][sample.name] = float(sample.value)  # "..._TOTAL_total" for a typed counter
    return [gpus[key] for key in sorted(gpus)]
