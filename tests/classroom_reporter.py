"""What GitHub Classroom's grading reporter prints for our results, by its documented rules.

The reporter (classroom-resources/autograding-grading-reporter@v1) is a GitHub Action, on no
package registry, so the tests cannot run it. This model follows its source, dist/main.js:
- runners: `core.getInput("runners").split(",")`, each result read from the environment
  variable `<RUNNER upper-cased>_RESULTS`, base64-decoded, JSON.parse'd; when anything throws,
  the catch prints "The runners input must be a comma-separated list of strings." if runners
  does not match /^([a-zA-Z0-9]+,)*[a-zA-Z0-9]+$/, else the error's message;
- ConsoleResults, per test: "pass" prints the name (with " - line N" unless line_no === 0);
  "error" prints only "Error: <message>"; any other status prints the name (with the line the
  same way) and never the message;
- getTestScore, the table line per runner: passed / total x max_score;
- NotifyClassroom, the notice posted to Classroom: "Points <sum of every tests[].score>/<sum of
  max_score>", both plain JavaScript float sums, printed with JavaScript's number formatting.
"""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass, field

RUNNERS_PATTERN = r"([a-zA-Z0-9]+,)*[a-zA-Z0-9]+"


@dataclass
class ReporterRun:
    log: list[str] = field(default_factory=list)
    table: dict[str, float] = field(default_factory=dict)
    notice: str = ""
    failed: bool = False


def js_number(value: float) -> str:
    """JavaScript's String(number) for the values that occur here (integers print bare)."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def report(runners: str, env: dict[str, str]) -> ReporterRun:
    run = ReporterRun()
    try:
        results = []
        for runner in runners.split(","):
            encoded = env.get(f"{runner.strip().upper()}_RESULTS", "")
            results.append((runner, json.loads(base64.b64decode(encoded).decode())))
    except (ValueError, KeyError):  # JSON.parse("") throws, as any malformed result
        if not re.fullmatch(RUNNERS_PATTERN, runners):
            run.log.append("The runners input must be a comma-separated list of strings.")
        else:
            run.log.append("Unexpected end of JSON input")
        run.failed = True
        return run
    total, maximum = 0.0, 0.0
    for runner, result in results:
        run.log.append(f"🔄 Processing: {runner}")
        passed = 0
        for test in result["tests"]:
            line = "" if test.get("line_no") == 0 else f" - line {test.get('line_no', 'undefined')}"
            if test["status"] == "pass":
                passed += 1
                run.log.append(f"✅ {test['name']}{line}")
            elif test["status"] == "error":
                fallback = "Failed to run test '" + test["name"] + "'"
                run.log.append(f"Error: {test.get('message') or fallback}")
            else:
                run.log.append(f"❌ {test['name']}{line}")
        run.table[runner] = passed / len(result["tests"]) * (result.get("max_score") or 0)
        if result.get("max_score"):
            maximum += result["max_score"]
            for test in result["tests"]:
                total += test["score"]
    run.notice = f"Points {js_number(total)}/{js_number(maximum)}"
    run.failed = any(r["status"] in ("fail", "error") for _, r in results)
    return run
