"""environment.yml and pyproject.toml name the same dependencies; README starts as promised."""

from __future__ import annotations

import re
import sys

from conftest import ROOT

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def _names(requirements: list[str]) -> set[str]:
    return {re.split(r"[<>=;\[ ]", r.strip(), maxsplit=1)[0].lower() for r in requirements if r.strip()}


def test_environment_yml_matches_pyproject_dependencies():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = _names(project["dependencies"] + project["optional-dependencies"]["dev"]) - {"tomli"}
    listed = set()
    text = (ROOT / "environment.yml").read_text()
    for line in text.split("dependencies:", 1)[1].splitlines():
        item = re.match(r"^\s+- (?!pip:)([A-Za-z0-9_.-]+)", line)
        if item and item.group(1) not in ("python", "pip", "-e"):
            listed.add(item.group(1).lower())
    assert wanted == listed, f"only in pyproject: {wanted - listed}; only in environment.yml: {listed - wanted}"


def test_readme_starts_with_the_two_commands():
    assert (ROOT / "README.md").read_text().startswith("```\nmake grade\nmake test\n```\n")


def test_ci_runs_make_test():
    assert "make test" in (ROOT / ".ci" / "run").read_text()
