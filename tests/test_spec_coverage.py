"""The spec as data the suites are checked against.

Every docstring a student reads (the functions and classes course.toml lists, and the public
methods of those classes that the student writes) is the specification. tests/spec/promises.toml
lists, for each of them, every sentence that promises checkable behaviour (an error and each of
its conditions, a shape, a dtype, a degenerate case, an argument that changes the formula, a
stability or memory promise) as a short quote of the docstring, and the tests (function names,
public and hidden) that check it. These tests keep the data honest:

- every quote occurs in its function's docstring (whitespace collapsed), so the data cannot drift
  from the spec;
- every named test exists in the module's public tests or hidden suites (parsed with ast);
- every sentence that says "raise" (or names an error class) names an error class, and each of
  its conditions is quoted by an entry whose tests exist and mention that error class;
- every student docstring has promises, and every promise has a test (the summary, per module,
  shows with `pytest -s`).

Nothing is graded here: the files are only parsed.
"""

from __future__ import annotations

import ast
import re
import sys
from collections import defaultdict
from functools import cache
from pathlib import Path

import pytest

from grader.course import COURSE_ROOT, load_course

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

PROMISES = COURSE_ROOT / "tests" / "spec" / "promises.toml"
FENCE = "### BEGIN SOLUTION"
ERROR_CLASS = re.compile(r"\b[A-Z]\w*(?:Error|Exception)\b")
SAYS_RAISE = re.compile(r"\braise[sd]?\b", re.IGNORECASE)
# "Raises ValueError for ...", "KeyError for ...", "RuntimeError("out of blocks") when ...".
CONDITIONS_FOLLOW = re.compile(r'^(?:\("[^"]*"\))?\s*(?:for:?|unless|when|if)\s+(.*)$', re.DOTALL)


def collapse(text: str) -> str:
    return " ".join(text.split())


def given_functions() -> set[tuple[str, str]]:
    """(module, name) of the functions course.toml marks `given = "..."` (code the course provides)."""
    course = load_course(COURSE_ROOT)
    return {(m.name, f.name) for m in course.modules.values() for f in m.functions.values() if f.given}


def student_docstrings() -> dict[tuple[str, str], str]:
    """(module, name) -> collapsed docstring of each student function and class, and of each
    public method of a student class that the student writes (it holds a solution fence):
    "Class.method". Given code (marked `given` in course.toml, or a docstring that starts with
    "Given") and empty docstrings are left out."""
    given = given_functions()
    docs: dict[tuple[str, str], str] = {}
    for module_name, module in load_course().modules.items():
        for name, function in module.functions.items():
            path = COURSE_ROOT / "solutions" / module_name / function.file
            source = path.read_text()
            node = next(
                (
                    n
                    for n in ast.parse(source).body
                    if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == name
                ),
                None,
            )
            assert node is not None, f"course.toml names {name}, which {path} does not define"
            doc = collapse(ast.get_docstring(node) or "")
            if (module_name, name) in given or doc.startswith("Given"):
                continue
            if doc:
                docs[module_name, name] = doc
            if isinstance(node, ast.ClassDef):
                for method in node.body:
                    if not isinstance(method, ast.FunctionDef):
                        continue
                    if method.name.startswith("_") and method.name != "__init__":
                        continue
                    method_doc = collapse(ast.get_docstring(method) or "")
                    if method_doc and FENCE in (ast.get_source_segment(source, method) or ""):
                        docs[module_name, f"{name}.{method.name}"] = method_doc
    return docs


@cache
def suite_tests() -> dict[str, dict[str, str]]:
    """module -> test function name -> its source, over the public tests (assignments/) and the
    hidden suites (grader/suites/)."""
    tests: dict[str, dict[str, str]] = defaultdict(dict)
    for module in load_course().modules:
        folders = (COURSE_ROOT / "assignments" / module, COURSE_ROOT / "grader" / "suites" / module)
        for path in sorted(p for folder in folders for p in folder.glob("test_*.py")):
            source = path.read_text()
            for node in ast.parse(source).body:
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
                    tests[module][node.name] = tests[module].get(node.name, "") + (
                        ast.get_source_segment(source, node) or ""
                    )
    return tests


@cache
def promises() -> list[dict]:
    return tomllib.loads(PROMISES.read_text())["promise"]


def sentences(doc: str) -> list[str]:
    """A collapsed docstring cut into sentences (a full stop, then a capital, a quote or a bracket)."""
    return re.split(r"(?<=[.!?])\s+(?=[A-Z`\"(\[])", doc)


def error_sentences(doc: str) -> list[str]:
    """The sentences that say raise or name an error class."""
    return [s for s in sentences(doc) if SAYS_RAISE.search(s) or ERROR_CLASS.search(s)]


def split_top_level(text: str) -> list[str]:
    """`text` cut at ", ", "; " and " or " outside brackets."""
    parts, depth, start, i = [], 0, 0, 0
    while i < len(text):
        char = text[i]
        depth += char in "([{"
        depth -= char in ")]}"
        if depth == 0:
            for separator in (", ", "; ", " or "):
                if text.startswith(separator, i):
                    parts.append(text[start:i])
                    start = i = i + len(separator)
                    break
            else:
                i += 1
            continue
        i += 1
    parts.append(text[start:])
    cleaned = []
    for part in parts:
        part = re.sub(r"^(?:or|and)\s+", "", part.strip()).rstrip(".;:, ").strip()
        if part:
            cleaned.append(part)
    return cleaned


def conditions(sentence: str) -> list[tuple[str, str | None]]:
    """(error class, condition) for each condition the sentence lists after an error class
    ("Raises ValueError for a, b or c"); (error class, None) for an error whose condition is
    written around it ("an update that would go past max_seq_len raises ValueError")."""
    found = []
    matches = list(ERROR_CLASS.finditer(sentence))
    for index, match in enumerate(matches):
        end = matches[index + 1].start() if index + 1 < len(matches) else len(sentence)
        after = CONDITIONS_FOLLOW.match(sentence[match.end() : end])
        if after:
            found += [(match.group(), part) for part in split_top_level(after.group(1))]
        else:
            found.append((match.group(), None))
    return found


def entries_of(module: str, function: str) -> list[dict]:
    return [p for p in promises() if p["module"] == module and p["function"] == function]


def where(promise: dict) -> str:
    return f"{promise['module']}.{promise['function']}: {promise['promise']!r}"


KINDS = {"error", "formula", "shape", "dtype", "degenerate", "stability", "memory", "behaviour"}
FIELDS = {"module", "function", "kind", "promise", "raises", "tests", "note"}


def test_every_entry_names_a_student_docstring_and_quotes_it():
    docs = student_docstrings()
    problems = []
    for promise in promises():
        missing = {"module", "function", "kind", "promise", "tests"} - set(promise)
        if missing or set(promise) - FIELDS or promise["kind"] not in KINDS:
            problems.append(f"{promise}: missing {sorted(missing)}, unknown fields or a kind not in {sorted(KINDS)}")
            continue
        doc = docs.get((promise["module"], promise["function"]))
        if doc is None:
            problems.append(f"{where(promise)}: no student docstring {promise['module']}.{promise['function']}")
        elif collapse(promise["promise"]) not in doc:
            problems.append(f"{where(promise)}: not in the docstring (edit the quote or the docstring)")
    assert not problems, "tests/spec/promises.toml:\n" + "\n".join(problems)


def test_every_named_test_exists_in_the_suites():
    tests = suite_tests()
    problems = [
        f"{where(promise)}: no test {name} in assignments/{promise['module']} or grader/suites/{promise['module']}"
        for promise in promises()
        for name in promise["tests"]
        if name not in tests[promise["module"]]
    ]
    assert not problems, "tests/spec/promises.toml:\n" + "\n".join(problems)


def test_every_raises_sentence_names_an_error_and_each_condition_is_tested():
    tests = suite_tests()
    problems = []
    for (module, function), doc in student_docstrings().items():
        for sentence in error_sentences(doc):
            if not ERROR_CLASS.search(sentence):
                problems.append(f"{module}.{function}: {sentence!r} says raise but names no error class")
                continue
            for error, condition in conditions(sentence):
                candidates = [
                    p
                    for p in entries_of(module, function)
                    if p.get("raises") == error
                    and collapse(p["promise"]) in sentence
                    and (condition in collapse(p["promise"]) if condition else error in p["promise"])
                ]
                shown = f"{module}.{function}: {error} " + (f"for {condition!r}" if condition else f"in {sentence!r}")
                if not candidates:
                    problems.append(f"{shown}: no entry with raises = {error!r} quotes it")
                    continue
                checked = [
                    name
                    for p in candidates
                    for name in p["tests"]
                    if name in tests[module] and error in tests[module][name]
                ]
                if not checked:
                    problems.append(f"{shown}: none of its tests exists and mentions {error}")
    assert not problems, "\n".join(problems)


def test_every_student_docstring_has_promises_and_every_promise_a_test():
    docs = student_docstrings()
    tests = suite_tests()
    without_entries = sorted(f"{m}.{f}" for m, f in docs if not entries_of(m, f))
    per_module: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    untested = []
    for promise in promises():
        counts = per_module[promise["module"]]
        counts[0] += 1
        if any(name in tests[promise["module"]] for name in promise["tests"]):
            counts[1] += 1
        else:
            untested.append(where(promise))
    lines = [f"{module:>14}: {done:3d} of {count:3d} promises tested" for module, (count, done) in per_module.items()]
    total = sum(c[0] for c in per_module.values())
    tested = sum(c[1] for c in per_module.values())
    lines.append(f"{'total':>14}: {tested:3d} of {total:3d} promises tested")
    print("\nspec coverage (tests/spec/promises.toml)\n" + "\n".join(lines))
    assert not without_entries, f"student docstrings without promises in tests/spec/promises.toml: {without_entries}"
    assert not untested, "promises without a test:\n" + "\n".join(untested)


@pytest.mark.parametrize(
    ("sentence", "expected"),
    [
        (
            "Raises ValueError for an unknown algorithm, world_size < 1, or negative nbytes, alpha, beta.",
            [
                ("ValueError", "an unknown algorithm"),
                ("ValueError", "world_size < 1"),
                ("ValueError", "negative nbytes"),
                ("ValueError", "alpha"),
                ("ValueError", "beta"),
            ],
        ),
        (
            "Raises ValueError for: bits not in (4, 8); NaN or infinite values; group_size < 1 or not dividing it.",
            [
                ("ValueError", "bits not in (4, 8)"),
                ("ValueError", "NaN"),
                ("ValueError", "infinite values"),
                ("ValueError", "group_size < 1"),
                ("ValueError", "not dividing it"),
            ],
        ),
        ("Raises ValueError unless 1 <= k <= E.", [("ValueError", "1 <= k <= E")]),
        (
            'Errors: KeyError for a missing id; RuntimeError("out of blocks") when an append needs more.',
            [("KeyError", "a missing id"), ("RuntimeError", "an append needs more")],
        ),
        ("An update past the end raises ValueError saying so, and changes nothing.", [("ValueError", None)]),
    ],
    ids=["commas-and-or", "semicolons-and-brackets", "unless", "several-errors", "condition-before"],
)
def test_conditions_are_read_off_a_raises_sentence(sentence, expected):
    assert conditions(sentence) == expected


def test_given_code_is_left_out_and_student_methods_are_in():
    docs = student_docstrings()
    assert ("zero", "train_ddp") not in docs and ("attention", "forward_backward") not in docs
    assert ("kv_cache", "KVCache.update") in docs and ("quantization", "QuantLinear.__init__") in docs
    assert ("attention", "MultiHeadLatentAttention.latent") not in docs  # given: no solution fence
    assert not any(isinstance(p.get("tests"), str) for p in promises()), "tests is a list of names"
    assert Path(PROMISES).is_file()
