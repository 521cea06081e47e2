"""Telling from a submission's source, without running it, that a function is still the stub.

A function whose whole body (after its docstring) is `raise NotImplementedError(...)` raises
whatever it is given, so the grader can answer "not implemented" in microseconds instead of
sending the call to a worker. A class counts as a stub when its `__init__` is one.

The answer must be what a worker would have said, so the grader only uses it when it is sure:
the file has been imported by a worker of this submission before (a file that fails to import
is reported as such), the name is bound once at the top level of the file and assigned nowhere
else (a later `ring_allreduce = my_version` or `Cls.__init__ = ...` wins at run time), the name
is not one of the course's given definitions (re-installed over the student's copy), and the file
uses none of the ways to rebind names dynamically.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

_DYNAMIC = ("globals(", "setattr(", "exec(", "__dict__", "sys.modules", "importlib", "__import__")


def _is_stub_body(body: list[ast.stmt]) -> str | None:
    """The stub's message when `body` is only `raise NotImplementedError(...)`, else None."""
    statements = list(body)
    if statements and isinstance(statements[0], ast.Expr) and isinstance(statements[0].value, ast.Constant):
        statements = statements[1:]  # the docstring
    if len(statements) != 1 or not isinstance(statements[0], ast.Raise):
        return None
    raised = statements[0].exc
    if not (isinstance(raised, ast.Call) and isinstance(raised.func, ast.Name)):
        return None
    if raised.func.id != "NotImplementedError" or raised.keywords or len(raised.args) > 1:
        return None
    if raised.args and not (isinstance(raised.args[0], ast.Constant) and isinstance(raised.args[0].value, str)):
        return None
    return raised.args[0].value if raised.args else ""


def _rebound_names(tree: ast.Module) -> set[str]:
    """Names assigned anywhere in the file, as a variable or as the object of an attribute."""
    names: set[str] = set()
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            names.update(node.names)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.With, ast.AsyncWith, ast.NamedExpr)):
            names.update(n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store))
        for target in targets:
            for part in ast.walk(target):
                if isinstance(part, ast.Name):
                    names.add(part.id)
    return names


@cache
def _stubs_of(path: Path, version: tuple[int, int], given: frozenset[str]) -> dict[str, str]:
    """{name: the stub's message} for the functions and classes of `path` (at `version`: its
    modification time and size) that are stubs."""
    try:
        source = path.read_text()
        tree = ast.parse(source)
    except (OSError, SyntaxError, ValueError):
        return {}
    if any(marker in source for marker in _DYNAMIC):
        return {}
    top_level: dict[str, list[ast.stmt]] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            top_level.setdefault(node.name, []).append(node)
    rebound = _rebound_names(tree)
    stubs: dict[str, str] = {}
    for name, nodes in top_level.items():
        if len(nodes) != 1 or name in rebound or name in given:
            continue
        node = nodes[0]
        if isinstance(node, ast.ClassDef):
            if node.decorator_list or node.keywords or not all(isinstance(b, ast.Name) for b in node.bases):
                continue
            init = [n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"]
            message = _is_stub_body(init[0].body) if len(init) == 1 and not init[0].decorator_list else None
        else:
            message = None if node.decorator_list else _is_stub_body(node.body)
        if message is not None:
            stubs[name] = message
    return stubs


def stub_message(path: Path, name: str, given: frozenset[str]) -> str | None:
    """The NotImplementedError message `name` in `path` is certain to raise, or None."""
    try:
        status = path.stat()
    except OSError:
        return None
    return _stubs_of(path.resolve(), (status.st_mtime_ns, status.st_size), given).get(name)
