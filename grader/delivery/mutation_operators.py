"""Mutants of a solution file: one small change each, made with Python's `ast`, only inside the
`### BEGIN SOLUTION` / `### END SOLUTION` fences (the code a student writes).

Why our own ~300 lines rather than mutmut or cosmic-ray: those tools mutate whole files (the
given code, the docstrings' examples, the helpers the grader re-installs) and know nothing of the
fences, so most of their mutants would test nothing a student writes.

A mutant is found on the parsed tree and written back as text: the changed node alone is
unparsed with `ast.unparse` and spliced over the node's own span, so the rest of the file stays
byte-identical and a mutant's diff is one or two lines. Every splice is checked by parsing the
result and comparing it with the tree changed directly; one that parses differently (an operator
of another precedence, `a / b ** 2` -> `a / b * 2`) is parenthesised, and one that still differs
is dropped. A mutant whose text equals the original, or another mutant's, is dropped too.

Ids are `file:line:col:operator:replacement` (line and column 1-based, at the changed token):
stable for as long as the fenced code above the change is, so a list of equivalent mutants
(tests/mutants/<module>.toml) survives edits elsewhere in the file.
"""

from __future__ import annotations

import ast
import copy
import difflib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from grader.sync import BEGIN, END


@dataclass(frozen=True)
class Mutant:
    """One changed copy of a solution file."""

    id: str
    file: str  # the file's name inside its module folder, e.g. "routing.py"
    line: int
    col: int
    operator: str
    replacement: str
    original: str  # the file's text, unchanged
    text: str  # the file's text with the change

    def diff(self, context: int = 3) -> str:
        """The change as a unified diff of the file (3 lines of context)."""
        lines = difflib.unified_diff(
            self.original.splitlines(keepends=True),
            self.text.splitlines(keepends=True),
            f"a/{self.file}",
            f"b/{self.file}",
            n=context,
        )
        return "".join(line if line.endswith("\n") else line + "\n" for line in lines)


@dataclass
class Change:
    """What an operator proposes: `target`'s span becomes `new` unparsed; `anchor` is the
    (line, 0-based byte column) of the token that changes, for the id."""

    target: ast.AST
    new: ast.AST
    operator: str
    replacement: str
    anchor: tuple[int, int]


class Source:
    """A file's text and tree, with what the operators need: positions as character offsets,
    parents of nodes, and which lines are fenced."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.tree = ast.parse(text)
        self.lines = text.splitlines(keepends=True)
        self.starts = [0]  # character offset where each line begins
        for line in self.lines:
            self.starts.append(self.starts[-1] + len(line))
        self.parents: dict[int, tuple[ast.AST, str, int | None]] = {}
        for node in ast.walk(self.tree):
            for field, value in ast.iter_fields(node):
                children = value if isinstance(value, list) else [value]
                for index, child in enumerate(children):
                    if isinstance(child, ast.AST):
                        self.parents[id(child)] = (node, field, index if isinstance(value, list) else None)
        self.fences = fenced_regions(text)

    def offset(self, line: int, byte_col: int) -> int:
        """Character offset of (1-based line, byte column): ast counts columns in UTF-8 bytes."""
        return self.starts[line - 1] + len(self.lines[line - 1].encode()[:byte_col].decode(errors="replace"))

    def span(self, node: ast.AST) -> tuple[int, int]:
        return self.offset(node.lineno, node.col_offset), self.offset(node.end_lineno, node.end_col_offset)

    def char_col(self, line: int, byte_col: int) -> int:
        return self.offset(line, byte_col) - self.starts[line - 1]

    def fenced(self, node: ast.AST) -> bool:
        return any(first <= node.lineno and node.end_lineno <= last for first, last in self.fences)

    def parent(self, node: ast.AST) -> ast.AST | None:
        return self.parents.get(id(node), (None, "", None))[0]

    def token_between(self, left: ast.AST, right: ast.AST, token: str) -> tuple[int, int]:
        """Where `token` (an operator) first appears between two operands; the left operand's end
        when it cannot be found (it is only the id's column)."""
        line, col = left.end_lineno, left.end_col_offset
        while line <= right.lineno:
            text = self.lines[line - 1].encode()
            stop = right.col_offset if line == right.lineno else len(text)
            found = text.find(token.encode(), col, stop)
            if found >= 0:
                return line, found
            line, col = line + 1, 0
        return left.end_lineno, left.end_col_offset

    def with_change(self, change: Change) -> str | None:
        """The file's text with the change spliced in, or None when it cannot be written as a
        one-node change or changes nothing."""
        expected = self._dump_replaced(change.target, change.new)
        start, end = self.span(change.target)
        replacement = ast.unparse(change.new)
        for candidate in (replacement, f"({replacement})"):
            text = self.text[:start] + candidate + self.text[end:]
            if text == self.text:
                return None
            try:
                if ast.dump(ast.parse(text)) == expected:
                    return text
            except SyntaxError:
                continue
        return None

    def _dump_replaced(self, old: ast.AST, new: ast.AST) -> str:
        """ast.dump of the tree with `old` replaced by `new` (put back afterwards)."""
        parent, field, index = self.parents[id(old)]
        if index is None:
            setattr(parent, field, new)
        else:
            getattr(parent, field)[index] = new
        try:
            return ast.dump(self.tree)
        finally:
            if index is None:
                setattr(parent, field, old)
            else:
                getattr(parent, field)[index] = old


def fenced_regions(text: str) -> list[tuple[int, int]]:
    """(first, last) line of the code between each pair of fences (the fence lines excluded)."""
    regions, begin = [], None
    for number, line in enumerate(text.splitlines(), start=1):
        if line.strip() == BEGIN:
            begin = number + 1
        elif line.strip() == END and begin is not None:
            regions.append((begin, number - 1))
            begin = None
    return regions


# ---- the operators: each looks at one node and yields the Changes it proposes ---------------

Operator = Callable[[ast.AST, Source], Iterator[Change]]

COMPARE_SWAPS = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt}
COMPARE_SWAPS |= {ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.Is: ast.IsNot, ast.IsNot: ast.Is}
COMPARE_SYMBOLS = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}
COMPARE_SYMBOLS |= {ast.Is: "is", ast.IsNot: "is"}  # `is not` is found by its first word
COMPARE_NAMES = {**COMPARE_SYMBOLS, ast.IsNot: "is-not"}  # ids have no spaces

ARITHMETIC_SWAPS: dict[type, list[type]] = {
    ast.Add: [ast.Sub],
    ast.Sub: [ast.Add],
    ast.Mult: [ast.Div],
    ast.Div: [ast.Mult, ast.FloorDiv],
    ast.FloorDiv: [ast.Div],
    ast.Pow: [ast.Mult],
}
ARITHMETIC_SYMBOLS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Pow: "**"}

FLOAT_DTYPES = ("float32", "float64", "float16", "bfloat16")
REDUCTION_SWAPS = {"sum": "mean", "mean": "sum", "max": "min", "min": "max", "amax": "amin", "amin": "amax"}


def compare(node: ast.AST, source: Source) -> Iterator[Change]:
    """`<` <-> `<=`, `>` <-> `>=`, `==` <-> `!=`, `is` <-> `is not`: each operator of a chain alone."""
    if not isinstance(node, ast.Compare):
        return
    for index, op in enumerate(node.ops):
        swap = COMPARE_SWAPS.get(type(op))
        if swap is None:
            continue
        new = copy.copy(node)
        new.ops = [*node.ops[:index], swap(), *node.ops[index + 1 :]]
        left = node.left if index == 0 else node.comparators[index - 1]
        anchor = source.token_between(left, node.comparators[index], COMPARE_SYMBOLS[type(op)])
        yield Change(node, new, "compare", COMPARE_NAMES[swap], anchor)


def arithmetic(node: ast.AST, source: Source) -> Iterator[Change]:
    """`+` <-> `-`, `*` <-> `/`, `//` <-> `/`, `**` -> `*`, in expressions and in `x += y`."""
    if isinstance(node, ast.BinOp):
        if any(_is_text(side) for side in (node.left, node.right)):
            return  # building a message, not computing
        left, right = node.left, node.right
    elif isinstance(node, ast.AugAssign):
        left, right = node.target, node.value
    else:
        return
    for swap in ARITHMETIC_SWAPS.get(type(node.op), []):
        new = copy.copy(node)
        new.op = swap()
        anchor = source.token_between(left, right, ARITHMETIC_SYMBOLS[type(node.op)])
        yield Change(node, new, "arithmetic", ARITHMETIC_SYMBOLS[swap], anchor)


def constant(node: ast.AST, source: Source) -> Iterator[Change]:
    """An integer literal n becomes n + 1 and n - 1 (`-1` is one literal here, not `-` and 1)."""
    value = _int_literal(node)
    if value is None or (isinstance(node, ast.Constant) and _int_literal(source.parent(node)) is not None):
        return  # not an integer, or the 1 of a `-1` (changed as a whole)
    for changed in (value + 1, value - 1):
        yield Change(node, _int_node(changed), "constant", str(changed), (node.lineno, node.col_offset))


def swap_args(node: ast.AST, source: Source) -> Iterator[Change]:
    """Two neighbouring positional arguments of a call trade places (`f(a, b)` -> `f(b, a)`)."""
    if not isinstance(node, ast.Call) or any(isinstance(arg, ast.Starred) for arg in node.args):
        return
    for index in range(len(node.args) - 1):
        first, second = node.args[index], node.args[index + 1]
        if ast.dump(first) == ast.dump(second):
            continue
        new = copy.copy(node)
        new.args = [*node.args[:index], second, first, *node.args[index + 2 :]]
        yield Change(node, new, "swap_args", f"{index},{index + 1}", (first.lineno, first.col_offset))


def drop_statement(node: ast.AST, source: Source) -> Iterator[Change]:
    """A statement becomes `pass`, where its block keeps another statement."""
    for field in ("body", "orelse", "finalbody"):
        block = getattr(node, field, None)
        if not isinstance(block, list) or not block or not isinstance(block[0], ast.stmt):
            continue
        statements = [s for s in block if not _is_docstring(s)]
        if len(statements) < 2:
            continue
        for statement in statements:
            if isinstance(statement, ast.Pass) or getattr(statement, "decorator_list", None):
                continue  # nothing to drop; a decorated definition starts above its `def`
            if source.fenced(statement):
                yield Change(statement, ast.Pass(), "drop_statement", "pass", (statement.lineno, statement.col_offset))


def boolean(node: ast.AST, source: Source) -> Iterator[Change]:
    """`and` <-> `or`, and `not x` -> `x`."""
    if isinstance(node, ast.BoolOp):
        new = copy.copy(node)
        new.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
        word = "and" if isinstance(node.op, ast.And) else "or"
        anchor = source.token_between(node.values[0], node.values[1], word)
        yield Change(node, new, "boolean", "or" if word == "and" else "and", anchor)
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        yield Change(node, node.operand, "boolean", "drop-not", (node.lineno, node.col_offset))


def dtype(node: ast.AST, source: Source) -> Iterator[Change]:
    """`torch.float32` -> float64, float16, bfloat16; the other three -> float32."""
    if not (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "torch"
        and node.attr in FLOAT_DTYPES
    ):
        return
    for other in FLOAT_DTYPES[1:] if node.attr == "float32" else ("float32",):
        new = copy.copy(node)
        new.attr = other
        yield Change(node, new, "dtype", other, (node.lineno, node.col_offset))


def reduction(node: ast.AST, source: Source) -> Iterator[Change]:
    """sum <-> mean, max <-> min, amax <-> amin (methods, torch functions, builtins);
    keepdim True <-> False; a dim or axis argument -1 <-> 0."""
    if isinstance(node, ast.Call):
        function = node.func
        if isinstance(function, ast.Attribute) and function.attr in REDUCTION_SWAPS:
            new = copy.copy(function)
            new.attr = REDUCTION_SWAPS[function.attr]
            anchor = (function.end_lineno, function.end_col_offset - len(function.attr))
            yield Change(function, new, "reduction", new.attr, anchor)
        elif isinstance(function, ast.Name) and function.id in ("max", "min"):
            new = ast.Name(id=REDUCTION_SWAPS[function.id], ctx=ast.Load())
            yield Change(function, new, "reduction", new.id, (function.lineno, function.col_offset))
    elif isinstance(node, ast.keyword) and node.arg is not None:
        value = node.value
        if node.arg == "keepdim" and isinstance(value, ast.Constant) and isinstance(value.value, bool):
            flipped = ast.keyword(arg="keepdim", value=ast.Constant(not value.value))
            yield Change(node, flipped, "reduction", f"keepdim={not value.value}", (node.lineno, node.col_offset))
        elif node.arg in ("dim", "axis") and _int_literal(value) in (-1, 0):
            other = 0 if _int_literal(value) == -1 else -1
            changed = ast.keyword(arg=node.arg, value=_int_node(other))
            yield Change(node, changed, "reduction", f"{node.arg}={other}", (node.lineno, node.col_offset))


OPERATORS: dict[str, Operator] = {
    "compare": compare,
    "arithmetic": arithmetic,
    "constant": constant,
    "swap_args": swap_args,
    "drop_statement": drop_statement,
    "boolean": boolean,
    "dtype": dtype,
    "reduction": reduction,
}


def _int_literal(node: ast.AST | None) -> int | None:
    """The value of `3` or `-3` written as a literal (never a bool); None for anything else."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _int_literal(node.operand)
        return None if inner is None or isinstance(node.operand, ast.UnaryOp) else -inner
    return None


def _int_node(value: int) -> ast.expr:
    """A literal as the parser builds it: -2 is `-` applied to 2."""
    return ast.Constant(value) if value >= 0 else ast.UnaryOp(ast.USub(), ast.Constant(-value))


def _is_text(node: ast.AST) -> bool:
    return isinstance(node, ast.JoinedStr) or (isinstance(node, ast.Constant) and isinstance(node.value, str))


def _is_docstring(statement: ast.stmt) -> bool:
    return isinstance(statement, ast.Expr) and _is_text(statement.value)


# ---- enumeration -----------------------------------------------------------------------------


def _nodes(node: ast.AST) -> Iterator[ast.AST]:
    """Every node, parents first, in source order. Not entered: what a `raise` raises (the
    docstrings specify an exception's type, never its message; the raise itself can still be
    dropped), f-strings (messages; before Python 3.12 the positions inside them are unreliable)
    and annotations (never evaluated)."""
    yield node
    if isinstance(node, ast.Raise):
        return
    for name, value in ast.iter_fields(node):
        if name in ("annotation", "returns"):
            continue
        for child in value if isinstance(value, list) else [value]:
            if isinstance(child, ast.AST) and not isinstance(child, ast.JoinedStr):
                yield from _nodes(child)


def mutants(file: str, text: str, operators: dict[str, Operator] | None = None) -> list[Mutant]:
    """Every mutant of one file's fenced code, in a fixed order (position, then operator)."""
    source = Source(text)
    changes = []
    for node in _nodes(source.tree):
        for operator in (operators or OPERATORS).values():
            changes += [c for c in operator(node, source) if source.fenced(c.target)]
    changes.sort(key=lambda c: c.anchor)  # stable: operators keep their order at one position
    found: list[Mutant] = []
    seen_texts, seen_ids = {text}, set()
    for change in changes:
        mutated = source.with_change(change)
        if mutated is None or mutated in seen_texts:
            continue
        seen_texts.add(mutated)
        line, col = change.anchor[0], source.char_col(*change.anchor) + 1
        mutant_id = f"{file}:{line}:{col}:{change.operator}:{change.replacement}"
        number = 2
        while mutant_id in seen_ids:  # two changes at one token: numbered in order
            mutant_id = f"{file}:{line}:{col}:{change.operator}:{change.replacement}#{number}"
            number += 1
        seen_ids.add(mutant_id)
        found.append(Mutant(mutant_id, file, line, col, change.operator, change.replacement, text, mutated))
    return found
