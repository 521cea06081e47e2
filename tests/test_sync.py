"""Single source: assignments/ is generated from solutions/ and contains no solution code."""

from __future__ import annotations

import ast

import pytest
from conftest import ROOT, run_grader

from grader.course import load_course
from grader.sync import BEGIN, END, HELPERS_COMMENT, SyncError, make_stub, stubs


def test_assignments_are_in_sync_with_solutions():
    completed = run_grader("sync", "--check")
    assert completed.returncode == 0, completed.stdout


def test_stubs_keep_signatures_and_docstrings_and_drop_every_solution_line():
    for stub in stubs(load_course()):
        solution = stub.source.read_text()
        assert BEGIN not in stub.text and END not in stub.text
        fenced, given, inside = [], [], False
        for line in solution.splitlines():
            if line.strip() == BEGIN:
                inside = True
            elif line.strip() == END:
                inside = False
            elif inside and line.strip() and not line.strip().startswith(("#", '"""')):
                fenced.append(line.strip())
            else:
                given.append(line.strip())
        # A fenced line may also appear in given code (e.g. "for block in blocks:"): it leaks
        # only if the stub has it more often than the given code does.
        stub_lines = [line.strip() for line in stub.text.splitlines()]
        leaked = [line for line in fenced if len(line) > 12 and stub_lines.count(line) > given.count(line)]
        assert not leaked, f"{stub.target}: solution lines in the stub: {leaked[:5]}"
        public = [
            n.name for n in ast.parse(solution).body if isinstance(n, ast.FunctionDef) and not n.name.startswith("_")
        ]
        stub_functions = {n.name: n for n in ast.parse(stub.text).body if isinstance(n, ast.FunctionDef)}
        for name in public:
            assert name in stub_functions, f"{stub.target} lost {name}()"
            assert ast.get_docstring(stub_functions[name]), f"{stub.target}: {name}() lost its docstring"


def test_fenced_function_body_becomes_not_implemented_naming_the_function_and_section():
    module = load_course().module("collectives")
    source = 'def ring_allreduce(t):\n    """Spec."""\n    ### BEGIN SOLUTION\n    return t\n    ### END SOLUTION\n'
    stub = make_stub(source, module=module, origin="x.py")
    assert 'raise NotImplementedError("implement ring_allreduce (lectures/01-collectives.md, section 2)")' in stub
    assert "return t" not in stub and '"""Spec."""' in stub


def test_module_level_fence_is_dropped_leaving_room_for_helpers():
    module = load_course().module("collectives")
    source = "import torch\n### BEGIN SOLUTION\ndef _helper():\n    return 1\n### END SOLUTION\n"
    stub = make_stub(source, module=module, origin="x.py")
    assert "_helper" not in stub and HELPERS_COMMENT in stub and "import torch" in stub


@pytest.mark.parametrize(
    "source",
    [
        "def f():\n    ### BEGIN SOLUTION\n    return 1\n",
        "def f():\n    return 1\n    ### END SOLUTION\n",
        "def f():\n    ### BEGIN SOLUTION\n    ### BEGIN SOLUTION\n    return 1\n    ### END SOLUTION\n",
    ],
    ids=["unclosed", "end-without-begin", "nested"],
)
def test_malformed_fences_are_reported_with_file_and_line(source):
    with pytest.raises(SyncError, match=r"x\.py:\d+"):
        make_stub(source, module=load_course().module("collectives"), origin="x.py")


def test_generated_stubs_import_cleanly():
    """Stubs must import (students run them) even though their bodies only raise."""
    for stub in stubs(load_course()):
        compile(stub.text, str(stub.target), "exec")
    assert (ROOT / "assignments" / "collectives" / "ring.py").is_file()


def test_a_fenced_method_is_named_with_its_class():
    module = load_course().module("collectives")
    source = (
        "class Cache:\n    def append(self, k):\n"
        "        ### BEGIN SOLUTION\n        return k\n        ### END SOLUTION\n"
    )
    assert 'raise NotImplementedError("implement Cache.append' in make_stub(source, module=module, origin="x.py")
