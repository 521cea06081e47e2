"""What a student writes, what the course gives, and the to-do list (grader/todo.py)."""

from __future__ import annotations

import pytest
from conftest import ROOT, run_grader

from grader.course import load_course
from grader.sandbox.given import given_names
from grader.todo import split_functions, unwritten

COURSE = load_course()


@pytest.mark.parametrize("module", list(COURSE.modules))
def test_every_given_helper_is_given_code_and_the_solutions_leave_nothing_to_write(module):
    spec = COURSE.module(module)
    written, given = split_functions(spec)
    for function in given:
        assert function.name in given_names(module, function.file), (
            f"course.toml marks {module}.{function.name} given, but {function.file} does not give it"
        )
    assert written, f"{module}: nothing for the student to write"
    assert unwritten(spec, ROOT / "solutions" / module) == [], f"{module}: the reference leaves a stub"
    todo = unwritten(spec, ROOT / "assignments" / module)
    assert todo and set(todo) <= {f.name for f in written}, f"{module}: the stubs' to-do list is {todo}"


def test_the_to_do_list_names_every_stub_even_those_no_test_reaches_first():
    todo = unwritten(COURSE.module("scaling"), ROOT / "assignments" / "scaling")
    assert {"hardware_flops_utilization", "gpu_hours"} <= set(todo), todo


def test_list_shows_what_a_student_writes_apart_from_the_given_helpers():
    listed = run_grader("list").stdout
    zero = listed.split("\nzero ")[1].split("\n\n")[0]
    writes, _, gives = zero.partition("given (")
    for name in ("DDP", "ShardedOptimizer", "fully_shard"):
        assert f"- {name} in zero/" in writes, zero
    for name in ("MLP", "make_model", "train_ddp"):
        assert f"- {name} in" not in writes and name in gives, zero
