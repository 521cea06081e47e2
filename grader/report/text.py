"""The terminal scoreboard: one row per module, then what to fix, most useful first."""

from __future__ import annotations

import io
from collections import Counter, defaultdict

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from grader.results import PASSED, SKIPPED, UNMEASURED, GradeReport, ModuleResult

MESSAGE_LINES = 14
HANG_HINT = (
    "\na call hung. While you debug: --time-limit SECONDS gives every call longer "
    "(make grade ARGS=\"MODULE --time-limit 120\"), and\n"
    "  .venv/bin/pytest assignments/MODULE -k TEST --no-timeout  runs it with no limit, so that a "
    "breakpoint() in your code can be stepped through"
)


def _scoreboard(report: GradeReport) -> Table:
    table = Table(title=f"{report.course}: {report.submission} on {report.device}", title_justify="left")
    table.add_column("module")
    table.add_column("score", justify="right")
    table.add_column("tests passed", justify="right")
    table.add_column("to do")
    for module in report.modules:
        passed = sum(t.status == PASSED for t in module.graded)
        failing = len(module.graded) - passed - len(module.unmeasured())
        todo = ", ".join(module.to_implement()) or ("fix the failures below" if failing else "-")
        uncounted = len(module.uncounted())
        if timed := len(module.unmeasured()) - uncounted:
            rerun = f"rerun: {timed} timed check(s) not measured"
            todo = rerun if todo == "-" else f"{rerun}; {todo}"
        if uncounted:
            linux = f"grade on Linux: {uncounted} check(s) not measured on this system"
            todo = linux if todo == "-" else f"{linux}; {todo}"
        style = "green" if module.graded and passed == len(module.graded) else "red" if not passed else "yellow"
        table.add_row(
            module.name,
            f"[{style}]{module.score:.1f} / {module.max_score:g}[/]",
            f"{passed} / {len(module.graded)}",
            todo,
        )
    table.add_section()
    table.add_row("[bold]total[/]", f"[bold]{report.score:.1f} / {report.max_score:g}[/]", "", "")
    return table


def _failures(console: Console, module: ModuleResult) -> None:
    for test in module.unmeasured():
        line = f"\n[bold]{module.name}[/]: [yellow]?[/] {escape(test.name)} [dim]({test.suite})[/]"
        console.print(line, highlight=False)
        console.print(f"      {test.message}", highlight=False, markup=False)
    failed = [t for t in module.tests if t.status not in (PASSED, SKIPPED, UNMEASURED)]
    if not failed:
        return
    console.print(f"\n[bold]{module.name}[/]: {len(failed)} failing")
    # Every test that needs the same unimplemented function says the same thing: say it once.
    unimplemented: dict[str, list[str]] = defaultdict(list)
    for test in failed:
        if test.kind == "not_implemented":
            unimplemented[test.message].append(test.name)
    for message, names in unimplemented.items():
        console.print(f"  [red]x[/] {len(names)} test(s): {escape(message)}", highlight=False)
    for test in failed:
        if test.kind == "not_implemented":
            continue
        lines = test.message.splitlines() or ["(no message)"]
        # The replay line stays whatever is cut: it is how the student reruns this case.
        replay = [lines.pop()] if len(lines) > MESSAGE_LINES + 1 and lines[-1].startswith("replay:") else []
        if len(lines) > MESSAGE_LINES:
            lines = [*lines[:MESSAGE_LINES], f"... ({len(lines) - MESSAGE_LINES} more lines)"]
        lines += replay
        console.print(f"  [red]x[/] {escape(test.name)} [dim]({test.suite})[/]", highlight=False)
        for line in lines:
            console.print(f"      {line}", highlight=False, markup=False)


def _figure(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, list) and len(value) > 4:
        return f"[{', '.join(_figure(v) for v in value[:4])}, ...]"
    if isinstance(value, list):
        return f"[{', '.join(_figure(v) for v in value)}]"
    return str(value)


def _measurements(console: Console, report: GradeReport) -> None:
    """What the performance checks measured (bytes, ratios, counts), passed or not."""
    measured = [(m.name, t) for m in report.modules for t in m.tests if t.measurements]
    if not measured:
        return
    console.print("\n[bold]measured[/]")
    for module, test in measured:
        figures = ", ".join(f"{k}={_figure(v)}" for k, v in test.measurements.items())
        console.print(f"  {module}: {test.name}: {figures}", highlight=False, markup=False)


def _skip_reason(message: str) -> str:
    """The first line of a skipped test's reason (pytest's "Skipped: " prefix dropped)."""
    line = message.strip().splitlines()[0] if message.strip() else "no reason given"
    return line.removeprefix("Skipped: ")


def text_report(report: GradeReport, *, color: bool = False) -> str:
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=color, width=110, color_system="standard" if color else None)
    for module in report.modules:
        _failures(console, module)
    if any(t.kind in ("timeout", "deadlock") for t in report.tests):
        console.print(HANG_HINT, highlight=False, markup=False)
    _measurements(console, report)
    skipped = [t for t in report.tests if t.status == SKIPPED]
    console.print()
    console.print(_scoreboard(report))
    if skipped:
        console.print(f"{len(skipped)} test(s) skipped, not graded here:", highlight=False, markup=False)
        reasons = Counter(_skip_reason(t.message) for t in skipped)
        for reason, count in sorted(reasons.items(), key=lambda item: -item[1]):
            console.print(f"  {count} x {reason}", highlight=False, markup=False)
    for note in report.notes:
        console.print(f"note: {note}", highlight=False, markup=False)
    console.print(f"graded in {report.duration_s:.1f} s")
    return buffer.getvalue()
