"""The hidden monitoring suite's tools: scrapes built GPU by GPU with the given generator, and
Prometheus' own rule tester, `promtool test rules`, run on a rules file and on series the suite
holds (a test file of input_series and exp_alerts, Prometheus' unit-test format).

The student's annotations are removed before promtool sees the rules: promtool compares an
alert's annotations too, and alert_rules' docstring leaves them free.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
import yaml

from grader.models.dcgm_scrape import Gpu, gpu_uuid

PROMTOOL_MISSING = (
    "promtool (Prometheus' rule tester) is not installed, so the alerting rules cannot be run: "
    "install Debian's or Ubuntu's `prometheus` package (apt-get install prometheus) or a Prometheus "
    "release's promtool on the PATH"
)
WHERE = "(see alert_rules' docstring in monitoring.py, and lecture 15, section 6)"


def promtool() -> str:
    """promtool's path; skips the calling test, saying why, when it is not installed."""
    path = shutil.which("promtool")
    if path is None:
        pytest.skip(PROMTOOL_MISSING)
    return path


def gpu(node: str, index: int, values: dict[str, float], pod: str | None = None, namespace: str | None = None,
        container: str | None = "trainer") -> Gpu:  # fmt: skip
    """One GPU for a built scrape; its UUID follows from (node, index), so repeated builds agree."""
    import random

    uuid = gpu_uuid(random.Random(f"{node}/{index}"))
    if pod is None:
        return Gpu(node, index, uuid, dict(values))
    return Gpu(node, index, uuid, dict(values), pod=pod, namespace=namespace, container=container)


# ------------------------------------------------------------------ promtool


def rules_for_promtool(rules_text: object) -> tuple[dict | None, str]:
    """The student's rules file parsed, with every annotation removed; (None, why) when it is
    not a YAML mapping with groups of rules."""
    if not isinstance(rules_text, str):
        return None, f"alert_rules must return the rules file as a str, got {type(rules_text).__name__}"
    try:
        document = yaml.safe_load(rules_text)
    except yaml.YAMLError as error:
        return None, f"the rules file is not YAML: {error}"
    groups = document.get("groups") if isinstance(document, dict) else None
    if not isinstance(groups, list) or not all(
        isinstance(g, dict) and isinstance(g.get("rules"), list) for g in groups
    ):
        return None, "the rules file must be a mapping whose `groups` is a list of {name, rules: [...]}"
    for group in groups:
        for rule in group["rules"]:
            if isinstance(rule, dict):
                rule.pop("annotations", None)
    return document, ""


def alert_names(document: dict) -> list[str]:
    return [rule.get("alert") for group in document["groups"] for rule in group["rules"] if isinstance(rule, dict)]


def series(name: str, labels: dict[str, str], values: str) -> dict:
    inner = ",".join(f'{key}="{value}"' for key, value in labels.items())
    return {"series": f"{name}{{{inner}}}", "values": values}


def run_promtool(document: dict, input_series: list[dict], checks: list[dict], interval: str = "1m") -> str:
    """Run `promtool test rules` on the rules `document` and one test of `input_series` and
    `checks` (alert_rule_test entries: eval_time, alertname, exp_alerts). Returns "" when every
    check passes, else promtool's report."""
    tool = promtool()
    with tempfile.TemporaryDirectory(prefix="promtool-") as folder:
        rules = Path(folder) / "rules.yml"
        rules.write_text(yaml.safe_dump(document, sort_keys=False))
        test = {
            "rule_files": [rules.name],
            "evaluation_interval": interval,
            "tests": [{"interval": interval, "input_series": input_series, "alert_rule_test": checks}],
        }
        (Path(folder) / "test.yml").write_text(yaml.safe_dump(test, sort_keys=False))
        done = subprocess.run(
            [tool, "test", "rules", "test.yml"], cwd=folder, capture_output=True, text=True, timeout=60
        )
    if done.returncode == 0:
        return ""
    report = (done.stdout + done.stderr).strip()
    return report[-6000:]


def check_rules(document: dict) -> str:
    """`promtool check rules` on the document: "" when Prometheus accepts every rule."""
    tool = promtool()
    with tempfile.TemporaryDirectory(prefix="promtool-") as folder:
        rules = Path(folder) / "rules.yml"
        rules.write_text(yaml.safe_dump(document, sort_keys=False))
        done = subprocess.run([tool, "check", "rules", rules.name], cwd=folder, capture_output=True, text=True,
                              timeout=60)  # fmt: skip
    return "" if done.returncode == 0 else (done.stdout + done.stderr).strip()[-4000:]
