"""`python -m grader mutants`: the mutation operators on small sources (each makes the expected
change, only inside the fences, with stable ids), the sample, the equivalent lists, and one
cheap end-to-end run that kills a mutant known to be wrong."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest
from conftest import ROOT, prefetched, run_grader

from grader.cli import main
from grader.course import load_course
from grader.delivery.mutants import (
    enclosing_function,
    graded_statuses,
    in_shard,
    load_equivalents,
    module_mutants,
    sample,
)
from grader.delivery.mutation_operators import OPERATORS, fenced_regions, mutants
from grader.perf import TIMED_CHECK_WORDS
from grader.usage import UsageError

SOURCE = '''\
import torch


def given(a, b):
    return a < b + 1  # outside the fences: never mutated


def scaled(x, n, flag=None):
    """Docstring: not code."""
    ### BEGIN SOLUTION
    total = x.sum(dim=-1, keepdim=True) / n  # a comment stays
    if n <= 2 and not flag is None:
        total = torch.zeros(n, 3, dtype=torch.float32)
    return total ** 2 - max(n, 1)
    ### END SOLUTION
'''

# id -> the one line it changes, as the mutant has it (None: the statement spans lines).
EXPECTED = {
    "toy.py:11:5:drop_statement:pass": "    pass  # a comment stays",
    "toy.py:11:15:reduction:mean": "    total = x.mean(dim=-1, keepdim=True) / n  # a comment stays",
    "toy.py:11:19:reduction:dim=0": "    total = x.sum(dim=0, keepdim=True) / n  # a comment stays",
    "toy.py:11:23:constant:-2": "    total = x.sum(dim=-2, keepdim=True) / n  # a comment stays",
    "toy.py:11:27:reduction:keepdim=False": "    total = x.sum(dim=-1, keepdim=False) / n  # a comment stays",
    "toy.py:11:41:arithmetic:*": "    total = x.sum(dim=-1, keepdim=True) * n  # a comment stays",
    "toy.py:11:41:arithmetic://": "    total = x.sum(dim=-1, keepdim=True) // n  # a comment stays",
    "toy.py:12:5:drop_statement:pass": None,
    "toy.py:12:10:compare:<": "    if n < 2 and not flag is None:",
    "toy.py:12:13:constant:3": "    if n <= 3 and not flag is None:",
    "toy.py:12:13:constant:1": "    if n <= 1 and not flag is None:",
    "toy.py:12:15:boolean:or": "    if n <= 2 or not flag is None:",
    "toy.py:12:19:boolean:drop-not": "    if n <= 2 and flag is None:",
    "toy.py:12:28:compare:is-not": "    if n <= 2 and not flag is not None:",
    "toy.py:13:29:swap_args:0,1": "        total = torch.zeros(3, n, dtype=torch.float32)",
    "toy.py:13:32:constant:4": "        total = torch.zeros(n, 4, dtype=torch.float32)",
    "toy.py:13:32:constant:2": "        total = torch.zeros(n, 2, dtype=torch.float32)",
    "toy.py:13:41:dtype:float64": "        total = torch.zeros(n, 3, dtype=torch.float64)",
    "toy.py:13:41:dtype:float16": "        total = torch.zeros(n, 3, dtype=torch.float16)",
    "toy.py:13:41:dtype:bfloat16": "        total = torch.zeros(n, 3, dtype=torch.bfloat16)",
    "toy.py:14:5:drop_statement:pass": "    pass",
    "toy.py:14:18:arithmetic:*": "    return total * 2 - max(n, 1)",
    "toy.py:14:21:constant:3": "    return total ** 3 - max(n, 1)",
    "toy.py:14:21:constant:1": "    return total ** 1 - max(n, 1)",
    "toy.py:14:23:arithmetic:+": "    return total ** 2 + max(n, 1)",
    "toy.py:14:25:reduction:min": "    return total ** 2 - min(n, 1)",
    "toy.py:14:29:swap_args:0,1": "    return total ** 2 - max(1, n)",
    "toy.py:14:32:constant:2": "    return total ** 2 - max(n, 2)",
    "toy.py:14:32:constant:0": "    return total ** 2 - max(n, 0)",
}


@functools.cache
def moe_mutants() -> list:
    """Every mutant of the moe module, generated once for the tests that read them."""
    return module_mutants(load_course(ROOT), "moe")


def _changed_line(original: str, mutated: str) -> str | None:
    """The one line a mutant changes (None when it changes a number of lines)."""
    before, after = original.splitlines(), mutated.splitlines()
    if len(before) != len(after):
        return None
    (changed,) = [new for old, new in zip(before, after) if old != new]
    return changed


def test_every_operator_makes_the_expected_change_and_nothing_else():
    found = mutants("toy.py", SOURCE)
    assert {m.id: _changed_line(SOURCE, m.text) for m in found} == EXPECTED
    assert {m.operator for m in found} == set(OPERATORS)


def test_ids_are_stable_across_runs_and_unique_in_a_module():
    assert [m.id for m in mutants("toy.py", SOURCE)] == [m.id for m in mutants("toy.py", SOURCE)]
    ids = [m.id for m in moe_mutants()]
    assert len(ids) == len(set(ids)) > 100


def test_text_outside_the_fences_is_byte_identical():
    source = SOURCE + '\n\ndef more(y):\n    return y * 2 + 1  # given code again\n'
    (first, last), = fenced_regions(source)
    lines = source.splitlines(keepends=True)
    for mutant in mutants("toy.py", source):
        mutated = mutant.text.splitlines(keepends=True)
        assert mutated[: first - 1] == lines[: first - 1], mutant.id
        tail = len(lines) - last
        assert mutated[len(mutated) - tail :] == lines[last:], mutant.id
        assert first <= mutant.line <= last


def test_a_change_of_precedence_is_parenthesised():
    source = "def f(a, b):\n    ### BEGIN SOLUTION\n    return a / b ** 2\n    ### END SOLUTION\n"
    returns = [m.text.splitlines()[2].strip() for m in mutants("f.py", source) if m.operator == "arithmetic"]
    assert returns == ["return a * b ** 2", "return a // b ** 2", "return a / (b * 2)"]


def test_no_mutant_inside_what_a_raise_raises_nor_an_unfenced_file():
    source = (
        "def f(k):\n    ### BEGIN SOLUTION\n    if k < 1:\n"
        '        raise ValueError("k", k + 1)\n    return k\n    ### END SOLUTION\n'
    )
    assert all(m.line != 4 or m.operator == "drop_statement" for m in mutants("f.py", source))
    assert mutants("f.py", "def f(k):\n    return k + 1\n") == []


def test_the_sample_is_seeded_and_spread_over_files_and_operators():
    every = moe_mutants()
    picked = sample(every, 12, seed=0)
    assert picked == sample(every, 12, seed=0) != sample(every, 12, seed=1)
    assert len({m.id for m in picked}) == 12
    assert len({m.file for m in picked}) == 3 and len({m.operator for m in picked}) >= 5


def test_a_sample_as_large_as_the_functions_holds_a_mutant_of_every_function():
    every = moe_mutants()
    functions = {(m.file, enclosing_function(m)) for m in every}
    assert ("routing.py", "expert_capacity") in functions, sorted(functions)
    for seed in (0, 1, 2):
        picked = sample(every, len(functions), seed)
        missing = functions - {(m.file, enclosing_function(m)) for m in picked}
        assert not missing, f"seed {seed}: a sample of {len(functions)} has no mutant of {sorted(missing)}"


def test_a_mutant_inside_a_method_names_its_class_and_one_outside_any_function_names_none():
    source = (
        "class Cache:\n    def get(self, k):\n        ### BEGIN SOLUTION\n        return k + 1\n"
        "        ### END SOLUTION\n\n\ndef f(k):\n    ### BEGIN SOLUTION\n    return k * 2\n    ### END SOLUTION\n"
    )
    names = {m.line: enclosing_function(m) for m in mutants("toy.py", source)}
    assert names[4] == "Cache.get" and names[10] == "f", names


def test_shards_split_the_mutants_chosen_into_disjoint_parts_that_cover_them():
    every = moe_mutants()
    shards = [[m.id for m in every if in_shard(m, i, 4)] for i in range(4)]
    assert sorted(i for shard in shards for i in shard) == sorted(m.id for m in every), "each mutant: one shard"
    assert all(len(shard) > len(every) / 8 for shard in shards), [len(shard) for shard in shards]
    again = [[m.id for m in reversed(every) if in_shard(m, i, 4)] for i in range(4)]
    assert [sorted(s) for s in again] == [sorted(s) for s in shards], "a shard depends on the ids alone"


def test_the_equivalent_lists_name_each_mutant_with_a_reason(tmp_path):
    for listed in sorted((ROOT / "tests" / "mutants").glob("*.toml")):
        assert all(reason.strip() for reason in load_equivalents(listed).values()), listed
    broken = tmp_path / "moe.toml"
    broken.write_text('[[equivalent]]\nid = "routing.py:1:1:constant:2"\n')
    with pytest.raises(UsageError, match="reason"):
        load_equivalents(broken)


@pytest.mark.parametrize(
    "args, message",
    [
        (["nope"], "unknown module"),
        (["moe", "--limit", "0"], "--limit"),
        (["moe", "--jobs", "0"], "--jobs"),
        (["moe", "--shard", "4/4"], "--shard"),
        (["moe", "--shard", "x"], "--shard"),
        (["collectives", "--id", "ring.py:1:1:nothing:x"], "no such mutant"),
    ],
)
def test_bad_arguments_give_a_one_line_reason(args, message, capsys):
    assert main(["mutants", *args]) == 2
    error = capsys.readouterr().err
    assert message in error and error.count("\n") == 1


def _seed_drawing_a_dropped_return(limit: int) -> tuple[int, str]:
    """A seed whose sample of moe holds a `return` of routing.py replaced by `pass`: the
    function then returns None, which every test of it must catch."""
    every = moe_mutants()
    for seed in range(200):
        for mutant in sample(every, limit, seed):
            line = mutant.original.splitlines()[mutant.line - 1].strip()
            if mutant.file == "routing.py" and mutant.operator == "drop_statement" and line.startswith("return "):
                return seed, mutant.id
    raise AssertionError("no seed draws a dropped return of routing.py")


@prefetched
def mutate_moe(folder: Path) -> dict:
    """`mutants moe --limit 3` with a seed that draws a known-bad mutant (in the background)."""
    seed, known_bad = _seed_drawing_a_dropped_return(3)
    out = folder / "moe.json"
    completed = run_grader("mutants", "moe", "--limit", "3", "--seed", str(seed), "--out", str(out), timeout=300)
    return {"completed": completed, "report": json.loads(out.read_text()) if out.is_file() else {}, "id": known_bad}


def test_a_known_bad_mutant_is_killed_end_to_end(tmp_path_factory):
    run = mutate_moe(tmp_path_factory)
    completed, report = run["completed"], run["report"]
    assert completed.returncode == 0, completed.stderr[-2000:]
    assert report["taken"] == 3 and report["generated"] > 100
    verdicts = {m["id"]: m for m in report["mutants"]}
    assert verdicts[run["id"]]["status"] == "killed" and verdicts[run["id"]]["killed_by"]
    assert report["killed"] + report["survived"] + report["equivalent"] == 3
    assert f"mutants of moe: {report['generated']} generated, 3 taken" in completed.stdout


@pytest.mark.parametrize("counted_perf", [False, True], ids=["correctness-only", "perf"])
def test_perf_adds_the_counted_checks_and_never_the_timed_ones(monkeypatch, counted_perf):
    """--perf grades the performance checks that count (a mutant that only wastes memory is seen
    there) but deselects every timed one (their verdict depends on the load); without it, no
    performance check at all. Read from the arguments handed to the grading itself."""
    calls = []

    def grade(course, modules, submission, **options):
        calls.append(options)
        return type("Report", (), {"tests": []})()

    monkeypatch.setattr("grader.runner.grade", grade)
    graded_statuses(load_course(), "moe", None, "", 0, counted_perf)
    (options,) = calls
    assert options["perf"] is counted_perf, options
    if counted_perf:
        select = options["select"]
        assert select.startswith("not (") and all(word in select for word in TIMED_CHECK_WORDS), select
    else:
        assert options.get("select") is None, options


def test_a_mutants_grading_stops_at_its_first_failure_and_the_references_runs_everything(monkeypatch):
    """One failure kills a mutant, so its grading stops there (seconds instead of the whole
    suite); the reference's grading, which lists the tests a mutant must keep passing, never
    stops early. Read from the arguments handed to the grading itself."""
    calls = []

    def grade(course, modules, submission, **options):
        calls.append(options)
        return type("Report", (), {"tests": []})()

    monkeypatch.setattr("grader.runner.grade", grade)
    graded_statuses(load_course(), "moe", None, "", 0)
    routing = (ROOT / "solutions" / "moe" / "routing.py").read_text()
    changed = routing.replace("def load_balancing_loss(", "def load_balancing_loss(  ", 1)
    graded_statuses(load_course(), "moe", "routing.py", changed, 0)
    reference, mutant = calls
    assert not reference.get("first_failure"), f"the reference's grading stops early: {reference}"
    assert mutant.get("first_failure") is True, f"a mutant's grading runs past its first failure: {mutant}"
    assert mutant.get("files_first") == ["routing", "load", "balancing", "loss"], (
        f"a mutant of load_balancing_loss in routing.py grades the suites named after either first: {mutant}"
    )
