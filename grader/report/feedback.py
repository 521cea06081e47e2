"""Per-student feedback in Markdown and HTML, rendered from a Gradescope-shaped results dict
(what `python -m grader grade --format json` writes; see grader/report/gradescope.py).

For each module: its score, every graded test with its verdict and the grader's message, and the
figures the performance checks measured. Messages are the grader's words for the student; hidden
tests never carry their source, so nothing here can show it. Every piece of text that came from
grading (test names, messages, a student's printed output quoted in a message) is escaped: in
HTML by `html.escape`, in Markdown by putting it in code spans and fenced blocks.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field
from typing import Any


@dataclass
class ModuleFeedback:
    """The tests of one module, in the order the grader ran them."""

    name: str
    title: str
    score: float = 0.0
    max_score: float = 0.0
    tests: list[dict[str, Any]] = field(default_factory=list)


def module_feedback(results: dict[str, Any], titles: dict[str, str] | None = None) -> list[ModuleFeedback]:
    """Group the tests of `results` by module (the first tag, as gradescope_json writes it).

    `titles` maps a module name to its title (course.toml); a module not in it is titled by name.
    Modules are listed in the order of their first test.
    """
    modules: dict[str, ModuleFeedback] = {}
    for test in results.get("tests", []):
        name = _module_of(test)
        module = modules.setdefault(name, ModuleFeedback(name, (titles or {}).get(name, name)))
        module.score += test.get("score", 0.0)
        module.max_score += test.get("max_score", 0.0)
        module.tests.append(test)
    return list(modules.values())


def _module_of(test: dict[str, Any]) -> str:
    tags = test.get("tags") or []
    return tags[0] if tags else test["name"].split(": ", 1)[0]


def _test_name(test: dict[str, Any]) -> str:
    return test["name"].split(": ", 1)[-1]


def _suite(test: dict[str, Any]) -> str:
    return test.get("extra_data", {}).get("suite", "")


def _figures(test: dict[str, Any]) -> dict[str, Any]:
    """The measured numbers of a test: extra_data less the grader's own bookkeeping keys."""
    return {k: v for k, v in test.get("extra_data", {}).items() if k not in ("suite", "kind")}


def _number(value: float) -> str:
    return f"{round(value, 2):g}"


def _figure(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, list):
        shown = ", ".join(_figure(v) for v in value[:6])
        return f"[{shown}{', ...' if len(value) > 6 else ''}]"
    return str(value)


def _verdict(test: dict[str, Any]) -> str:
    return "passed" if test.get("status") == "passed" else "failed"


def _notes(results: dict[str, Any]) -> list[str]:
    """The report's notes: the parts of `output` after the per-module summaries."""
    parts = [p for p in str(results.get("output", "")).split("; ") if p]
    return [p for p in parts if not re.fullmatch(r"\w+: [\d.]+/[\d.]+", p)]


# ---- Markdown -------------------------------------------------------------------------------


def _code_span(text: str) -> str:
    """`text` as a Markdown code span: nothing in it is markup (pipes escaped for tables)."""
    text = " ".join(text.split())
    ticks = "`" * (max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{ticks}{pad}{text}{pad}{ticks}".replace("|", "\\|")


def _fenced(text: str) -> str:
    """`text` in a fenced block longer than any backtick run inside it, so it cannot close early."""
    fence = "`" * max(3, max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    return f"{fence}text\n{text}\n{fence}"


def feedback_markdown(results: dict[str, Any], *, student: str, titles: dict[str, str] | None = None) -> str:
    """The feedback for one student as Markdown (results: the Gradescope-shaped dict)."""
    modules = module_feedback(results, titles)
    total = sum(m.max_score for m in modules)
    lines = [
        f"# Feedback for {_code_span(student)}",
        "",
        f"**Total: {_number(results.get('score', 0.0))} / {_number(total)}**",
    ]
    for note in _notes(results):
        lines += ["", f"Note: {_code_span(note)}"]
    if not modules:
        lines += ["", "No test was graded."]
    for module in modules:
        passed = sum(_verdict(t) == "passed" for t in module.tests)
        lines += [
            "",
            f"## {module.name}: {_number(module.score)} / {_number(module.max_score)}",
            "",
            f"{module.title}. {passed} of {len(module.tests)} tests passed.",
            "",
            "| verdict | test | suite | points |",
            "| --- | --- | --- | --- |",
        ]
        for test in module.tests:
            points = f"{_number(test.get('score', 0.0))} / {_number(test.get('max_score', 0.0))}"
            lines.append(f"| {_verdict(test)} | {_code_span(_test_name(test))} | {_suite(test)} | {points} |")
        failed = [t for t in module.tests if _verdict(t) != "passed"]
        if failed:
            lines += ["", "### What failed"]
        for test in failed:
            lines += ["", f"{_code_span(_test_name(test))} ({_suite(test)}):", "", _fenced(test.get("output", ""))]
        measured = [t for t in module.tests if _figures(t)]
        if measured:
            lines += ["", "### Measured", ""]
        for test in measured:
            figures = ", ".join(f"{k} = {_figure(v)}" for k, v in _figures(test).items())
            lines.append(f"- {_code_span(_test_name(test))}: {_code_span(figures)}")
    return "\n".join(lines) + "\n"


# ---- HTML -----------------------------------------------------------------------------------

_STYLE = """
body { font-family: system-ui, sans-serif; max-width: 60rem; margin: 2rem auto; padding: 0 1rem; }
table { border-collapse: collapse; width: 100%; }
td, th { border-bottom: 1px solid #ddd; padding: 0.3rem 0.5rem; text-align: left; vertical-align: top; }
.passed { color: #17692a; } .failed { color: #b00020; }
pre { background: #f6f6f6; padding: 0.5rem; white-space: pre-wrap; margin: 0.3rem 0; }
code { font-size: 0.9em; }
"""


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def feedback_html(results: dict[str, Any], *, student: str, titles: dict[str, str] | None = None) -> str:
    """The feedback for one student as a standalone HTML page; all graded text is escaped."""
    modules = module_feedback(results, titles)
    total = sum(m.max_score for m in modules)
    body = [
        f"<h1>Feedback for {_e(student)}</h1>",
        f"<p><strong>Total: {_number(results.get('score', 0.0))} / {_number(total)}</strong></p>",
    ]
    body += [f"<p>Note: {_e(note)}</p>" for note in _notes(results)]
    if not modules:
        body.append("<p>No test was graded.</p>")
    for module in modules:
        passed = sum(_verdict(t) == "passed" for t in module.tests)
        body += [
            f"<h2>{_e(module.name)}: {_number(module.score)} / {_number(module.max_score)}</h2>",
            f"<p>{_e(module.title)}. {passed} of {len(module.tests)} tests passed.</p>",
            "<table><tr><th>verdict</th><th>test</th><th>suite</th><th>points</th><th>message</th></tr>",
        ]
        for test in module.tests:
            verdict = _verdict(test)
            message = "" if verdict == "passed" else f"<pre>{_e(test.get('output', ''))}</pre>"
            figures = ", ".join(f"{k} = {_figure(v)}" for k, v in _figures(test).items())
            if figures:
                message += f"<div>measured: <code>{_e(figures)}</code></div>"
            points = f"{_number(test.get('score', 0.0))} / {_number(test.get('max_score', 0.0))}"
            body.append(
                f'<tr><td class="{verdict}">{verdict}</td><td><code>{_e(_test_name(test))}</code></td>'
                f"<td>{_e(_suite(test))}</td><td>{points}</td><td>{message}</td></tr>"
            )
        body.append("</table>")
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>Feedback for {_e(student)}</title>\n<style>{_STYLE}</style>\n</head>\n<body>\n"
        + "\n".join(body)
        + "\n</body>\n</html>\n"
    )
