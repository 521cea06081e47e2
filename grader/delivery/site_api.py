"""The website's API pages: what a student may read about each module's code, taken with `ast`
from the stubs in assignments/<m>/ (never from solutions/, whose bodies are the answers).

An entry is a top-level public function or class of a student file: its signature exactly as
the stub writes it, and its docstring, which is the specification. A class lists its public
methods (and `__init__`) the same way. Entries are marked "you implement" when the stub's body
still raises NotImplementedError, "given" otherwise (code the course provides: read it, and the
grader re-installs it anyway).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

from grader.course import Course, Module


@dataclass(frozen=True)
class Entry:
    """One documented definition of a stub file."""

    name: str  # "ring_allreduce", or "DDP.forward" for a method
    kind: str  # "function", "class" or "method"
    file: str  # file name in the module folder, e.g. "ring.py"
    signature: str  # the source lines from `def`/`class` (decorators included) to the body
    docstring: str
    to_implement: bool  # the stub's body raises NotImplementedError
    methods: tuple[Entry, ...] = field(default=())

    @property
    def anchor(self) -> str:
        """The HTML id of the entry on its module's API page (lectures link here)."""
        return self.name.replace(".", "-")


def _raises_not_implemented(node: ast.AST) -> bool:
    """Whether the stub left a `raise NotImplementedError(...)` anywhere inside `node`."""
    for child in ast.walk(node):
        if isinstance(child, ast.Raise) and child.exc is not None:
            called = child.exc.func if isinstance(child.exc, ast.Call) else child.exc
            if isinstance(called, ast.Name) and called.id == "NotImplementedError":
                return True
    return False


def _signature(node: ast.FunctionDef | ast.ClassDef, lines: list[str]) -> str:
    """The definition's header as written in the file: decorators, `def`/`class` and the
    parameters, up to the first line of the body (without the trailing colon)."""
    first = min([node.lineno, *(d.lineno for d in node.decorator_list)]) - 1
    body_start = node.body[0].lineno - 1
    header = lines[first:body_start]
    indent = len(header[0]) - len(header[0].lstrip())
    text = "\n".join(line[indent:] for line in header).rstrip()
    return text.removesuffix(":")


def _is_public(name: str) -> bool:
    return not name.startswith("_") or name == "__init__"


def _entry(node: ast.FunctionDef | ast.ClassDef, file: str, lines: list[str], prefix: str = "") -> Entry:
    docstring = ast.get_docstring(node) or ""
    if isinstance(node, ast.ClassDef):
        methods = tuple(
            _entry(child, file, lines, prefix=f"{node.name}.")
            for child in node.body
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) and _is_public(child.name)
        )
        kind = "class"
    else:
        methods, kind = (), "method" if prefix else "function"
    stub = _raises_not_implemented(node)
    return Entry(prefix + node.name, kind, file, _signature(node, lines), docstring, stub, methods)


def file_entries(path: Path) -> tuple[str, list[Entry]]:
    """(the module docstring, the public top-level functions and classes) of one stub file."""
    source = path.read_text()
    tree = ast.parse(source, filename=str(path))
    lines = source.splitlines()
    entries = [
        _entry(node, path.name, lines)
        for node in tree.body
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and not node.name.startswith("_")
    ]
    return ast.get_docstring(tree) or "", entries


def module_entries(course: Course, module: Module) -> dict[str, tuple[str, list[Entry]]]:
    """Per student file of `module` (course.toml order): its docstring and entries."""
    folder = course.public_tests(module.name)  # assignments/<m>/: the stubs
    return {file: file_entries(folder / file) for file in module.files}


def _fence(text: str, language: str) -> str:
    """`text` in a fenced code block whose fence is longer than any backtick run inside it."""
    longest = max((len(run) for run in text.split("\n") for run in _backtick_runs(run)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{language}\n{text}\n{fence}"


def _backtick_runs(line: str) -> list[str]:
    runs, current = [], ""
    for char in line:
        if char == "`":
            current += char
        elif current:
            runs.append(current)
            current = ""
    return [*runs, current] if current else runs


def docstring_block(docstring: str) -> str:
    """A docstring as written: they are laid out as plain text (aligned columns, formulas), not
    Markdown. The `docstring` class (site.css) wraps its long lines instead of scrolling them."""
    return f'<div class="docstring" markdown>\n\n{_fence(docstring, "text")}\n\n</div>'


def _entry_markdown(entry: Entry, level: int, section: str | None, lecture_link: str) -> list[str]:
    heading = "#" * level
    # The name in backticks: `__init__` would otherwise turn into bold "init".
    parts = [f"{heading} `{entry.name}` {{ #{entry.anchor} }}", "", _fence(entry.signature, "python"), ""]
    if entry.to_implement:
        where = f" (lecture section [{section}](../{lecture_link}))" if section else ""
        parts += [f"**You implement this**{where}.", ""]
    elif entry.kind != "method":
        parts += ["*Given*: the course's code; read it, the grader re-installs it.", ""]
    if entry.docstring:
        parts += [docstring_block(entry.docstring), ""]
    for method in entry.methods:
        parts += _entry_markdown(method, level + 1, section, lecture_link)
    return parts


def api_page(course: Course, module: Module, sections: dict[str, tuple[str, str]]) -> str:
    """The Markdown of `module`'s API page. `sections` maps a function name to (its lecture
    section's title, the section's path from the site's root, e.g. lectures/01-collectives.md#...)."""
    number = list(course.modules).index(module.name) + 1
    lines = [
        f"# {number}. {module.name}: API",
        "",
        f"The functions and classes of `assignments/{module.name}/`, as the stubs define them. Each "
        "docstring is the specification the grader holds your code to. "
        f"[Lecture](../{module.lecture}) · [Notebook](../notebooks/{module.name}.md)",
        "",
    ]
    for file, (docstring, entries) in module_entries(course, module).items():
        lines += [f"## {file}", ""]
        if docstring:
            lines += [docstring_block(docstring), ""]
        for entry in entries:
            section, link = sections.get(entry.name, (None, ""))
            lines += _entry_markdown(entry, 3, section, link)
    return "\n".join(lines)
