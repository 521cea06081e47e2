"""The sandbox on its own: limits, classification of failures, safe replies, stack reading,
refused calls. Uses a throwaway module written into a temporary folder."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch
from conftest import ROOT

from grader.course import Function, Module, load_course
from grader.sandbox import Saved, Step, Submission, SubmissionError
from grader.sandbox.given import given_code
from grader.sandbox.guard import ForbiddenCallError, Guard
from grader.sandbox.landlock import landlock_available, readable_roots, signals_scoped
from grader.sandbox.pool import FILE_SIZE_LIMIT_MB
from grader.sandbox.protocol import decode_reply, encode_reply
from grader.sandbox.stacks import where
from grader.sandbox.submission import reaches_into_the_grader
from grader.testing import assert_matches, describe_difference

PROBE = """
import numpy as np
import torch

def grab_memory():
    return torch.empty(2**40, dtype=torch.uint8).sum()

def return_an_object():
    return object()

def return_numpy():
    return np.float64(2.5), np.int64(3)

def shout(text):
    print("hello from the worker:", text)
    return len(str(text))

def spin():
    while True:
        pass


def leave_a_thread():
    import threading
    import time

    threading.Thread(target=lambda: time.sleep(60), name="spinner", daemon=True).start()


def matmul(a, b):
    return a @ b


def uses_an_unwritten_helper():
    return helper_to_write()


def helper_to_write():
    raise NotImplementedError("implement helper_to_write (lectures/probe.md, section 1)")


def add_rows_one_by_one(x):
    return torch.stack([row + 1 for row in x])


class Counter:
    def __init__(self, start):
        self.value = start

    def add(self, n):
        self.value += n
        return self.value

    def undone(self):
        raise NotImplementedError("implement Counter.undone")
"""


@pytest.fixture(scope="module")
def probe(tmp_path_factory) -> Submission:
    folder = tmp_path_factory.mktemp("submission") / "probe"
    folder.mkdir()
    (folder / "probe.py").write_text(PROBE)
    names = ["grab_memory", "return_an_object", "return_numpy", "shout", "spin", "matmul", "add_rows_one_by_one"]
    names += ["Counter", "uses_an_unwritten_helper", "helper_to_write", "leave_a_thread"]
    module = Module(
        "probe",
        "Probe",
        "lectures/probe.md",
        1,
        ("probe.py",),
        {n: Function(n, "probe.py", "1. Probe") for n in names},
        2.0,
        1024,
    )
    submission = Submission(module, folder, echo=True)
    yield submission
    submission.close()


def test_memory_beyond_the_worker_limit_is_reported_as_memory(probe):
    with pytest.raises(SubmissionError) as raised:
        probe.function("grab_memory")()
    assert raised.value.kind == "memory"


def test_returning_an_arbitrary_object_is_refused_with_a_reason(probe):
    with pytest.raises(SubmissionError) as raised:
        probe.function("return_an_object")()
    assert raised.value.kind == "bad_return" and "returned a object" in raised.value.message


def test_numpy_scalars_come_back_as_python_numbers(probe):
    assert probe.function("return_numpy")() == (2.5, 3)


def test_printed_output_is_echoed_with_the_result(probe, capsys):
    assert probe.function("shout")("hi") == 2
    assert "hello from the worker: hi" in capsys.readouterr().out


def test_an_infinite_loop_times_out_with_the_line_it_was_on(probe):
    with pytest.raises(SubmissionError) as raised:
        probe.function("spin").run(time_limit_s=1)
    assert raised.value.kind == "timeout"
    assert "probe.py:" in raised.value.message and "in spin()" in raised.value.message
    with pytest.raises(SubmissionError, match="not run: spin ran past its time limit"):
        probe.function("spin")()
    probe.restart()
    assert probe.function("shout")("again") == 5


def test_replies_are_read_with_the_restricted_unpickler():
    class Payload:
        def __reduce__(self):
            return (print, ("this would run in the grader",))

    with pytest.raises(ValueError, match="could not be read safely"):
        decode_reply(encode_reply(Payload()))
    assert decode_reply(encode_reply({"x": [1, 2.0, "s"]})) == {"x": [1, 2.0, "s"]}


def test_guard_refuses_armed_names_and_records_attempts():
    probe_module = types.ModuleType("guard_probe")
    probe_module.collective = lambda: "ran"
    sys.modules["guard_probe"] = probe_module
    guard = Guard(["guard_probe.collective"])
    bound_early = probe_module.collective  # a `from guard_probe import collective` before arming
    assert bound_early() == "ran"
    refusal = r"student_function may not call guard_probe\.collective"
    with (
        guard.refusing(["guard_probe.collective"], "student_function"),
        pytest.raises(ForbiddenCallError, match=refusal),
    ):
        bound_early()
    assert guard.attempts == ["guard_probe.collective"]
    assert bound_early() == "ran"


def test_where_points_at_the_students_line_and_the_library_call(tmp_path):
    student = tmp_path / "ring.py"
    student.write_text("import torch\n\ndef ring():\n    dist.recv(buffer, 0)\n")
    dump = (
        "Thread 0x00007f0000000001 (most recent call first):\n"
        '  File "/site-packages/torch/distributed/distributed_c10d.py", line 2400 in recv\n'
        f'  File "{student}", line 4 in ring\n'
        '  File "/grader/sandbox/worker.py", line 120 in run\n'
    )
    assert where(dump, Path(tmp_path)) == (
        "ring.py:4 in ring(): dist.recv(buffer, 0)  [waiting in recv() of torch/distributed/distributed_c10d.py]"
    )
    assert "no Python stack" in where("", Path(tmp_path))


def test_a_script_keeps_objects_between_steps_and_calls_their_methods(probe):
    result = probe.script(
        [
            Step("Counter", (10,), save_as="counter", send_back=False),
            Step("counter.add", (5,)),
            Step("counter.add", (2,)),
            Step("shout", (Saved("counter"),)),  # a kept object can be passed as an argument too
        ]
    )
    assert result.steps[0][:3] == [None, 15, 17]


def test_a_failing_step_is_named_and_a_method_stub_names_its_class(probe):
    with pytest.raises(SubmissionError) as raised:
        probe.script([Step("Counter", (1,), save_as="c", send_back=False), Step("c.undone")])
    assert raised.value.kind == "not_implemented"
    assert raised.value.message.startswith("Counter.undone is not implemented yet: implement it in ")
    with pytest.raises(SubmissionError, match=r"in step 2 of 2 \(Counter.add\)"):
        probe.script([Step("Counter", (1,), save_as="c", send_back=False), Step("c.add", ("not a number",))])


def test_probes_count_flops_and_operators_inside_the_worker(probe):
    a, b = torch.ones(4, 8), torch.ones(8, 16)
    flops = probe.function("matmul").run((a, b), measure=("flops", "largest")).measurements[0][0]
    assert flops["flops"] == 2 * 4 * 8 * 16 and flops["largest"] == 4 * 16
    loop = probe.function("add_rows_one_by_one")
    small = loop.run((torch.ones(4, 3),), measure=("ops",)).measurements[0][0]["ops"]
    large = loop.run((torch.ones(32, 3),), measure=("ops",)).measurements[0][0]["ops"]
    assert large > small, "a Python loop over rows does more operator calls for more rows"


def test_not_implemented_names_the_missing_function_even_when_called_indirectly(probe):
    with pytest.raises(SubmissionError) as raised:
        probe.function("uses_an_unwritten_helper")()
    assert raised.value.message.startswith("helper_to_write is not implemented yet: implement it in ")


def test_assert_matches_takes_nan_and_inf_only_where_the_reference_has_them():
    nan, inf = float("nan"), float("inf")
    reference = torch.tensor([1.0, nan, inf])
    assert_matches(torch.tensor([1.0, nan, inf]), reference, "same specials")
    for wrong in ([nan, nan, inf], [1.0, 2.0, inf], [1.0, nan, -inf], [1.0, nan, 3.0]):
        with pytest.raises(AssertionError, match="1 of 3 elements differ"):
            assert_matches(torch.tensor(wrong), reference, "x", rtol=1e-3, atol=1e-3)


def test_a_scalar_mismatch_shows_both_values_and_last_bit_differences_show_every_digit():
    scalar = describe_difference(torch.tensor(2.5), torch.tensor(3.0), "loss", 1e-6, 1e-6)
    assert scalar.startswith("loss: got 2.5, expected 3 (rtol=1e-06"), scalar
    a, b = torch.tensor([0.1 + 0.2], dtype=torch.float64), torch.tensor([0.3], dtype=torch.float64)
    close = describe_difference(a, b, "sum", 0.0, 0.0)
    assert "got 0.30000000000000004, expected 0.29999999999999999" in close, close
    assert "the last bits differ" in close


def test_guard_wrappers_hide_the_original_and_report_being_replaced():
    probe_module = types.ModuleType("guard_tamper_probe")
    original = probe_module.collective = lambda: "ran"
    sys.modules["guard_tamper_probe"] = probe_module
    guard = Guard(["guard_tamper_probe.collective"])
    assert not hasattr(probe_module.collective, "__wrapped__")
    assert guard.tampered() == []
    probe_module.collective = original
    assert guard.tampered() == ["guard_tamper_probe.collective"]


def test_code_importing_the_grader_or_unwrapping_a_guard_is_refused_before_it_runs(tmp_path):
    (tmp_path / "clean.py").write_text("import torch\nfrom . import helpers\nfrom grader.models import tiny_gpt\n")
    (tmp_path / "sneaky.py").write_text("import torch\n\nfrom grader.sandbox import probes\n")
    (tmp_path / "unwraps.py").write_text("import torch.distributed as dist\nf = dist.all_reduce.__wrapped__\n")
    (tmp_path / "broken.py").write_text("def f(:\n")
    assert reaches_into_the_grader(tmp_path, ["clean.py", "broken.py", "missing.py"]) is None
    refusal = reaches_into_the_grader(tmp_path, ["sneaky.py"])
    assert refusal.startswith("sneaky.py imports grader.sandbox.probes (line 3)")
    assert reaches_into_the_grader(tmp_path, ["unwraps.py"]).startswith("unwraps.py uses __wrapped__ (line 2)")


def test_landlock_rules_cover_everything_but_the_hidden_folder(tmp_path):
    hidden = tmp_path / "course" / "suites"
    (hidden / "m").mkdir(parents=True)
    (tmp_path / "course" / "grader.py").write_text("")
    (tmp_path / "other").mkdir()
    roots = {path for path, _ in readable_roots([hidden])}
    assert tmp_path / "course" / "grader.py" in roots and tmp_path / "other" in roots
    assert not any(root == hidden or root.is_relative_to(hidden) or hidden.is_relative_to(root) for root in roots)


@pytest.mark.skipif(not landlock_available(), reason="the kernel offers no Landlock")
def test_a_hidden_folder_cannot_be_read_by_a_worker_but_everything_else_can(tmp_path):
    hidden = tmp_path / "hidden"
    hidden.mkdir()
    (hidden / "answers.txt").write_text("42")
    (tmp_path / "public.txt").write_text("7")
    script = (
        "import sys; from pathlib import Path; from grader.sandbox.landlock import hide_folders\n"
        f"assert hide_folders([Path({str(hidden)!r})])\n"
        f"print(Path({str(tmp_path / 'public.txt')!r}).read_text())\n"
        f"Path({str(hidden / 'answers.txt')!r}).read_text()\n"
    )
    completed = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert completed.stdout.strip() == "7"
    assert "PermissionError" in completed.stderr


@pytest.mark.skipif(not landlock_available(), reason="the kernel offers no Landlock")
def test_a_worker_can_still_move_files_between_folders_but_not_out_of_a_hidden_one(tmp_path):
    """Triton's kernel cache (and pip, and atomic saves) write in one folder and rename into
    another: Landlock refuses that (EXDEV) unless the rules grant REFER, which broke every
    Triton compilation on a GPU. Moving a hidden file out stays refused."""
    hidden, cache = tmp_path / "hidden", tmp_path / "cache"
    (cache / "tmp.1234").mkdir(parents=True)
    (cache / "tmp.1234" / "kernel.cubin").write_text("compiled")
    hidden.mkdir()
    (hidden / "answers.txt").write_text("42")
    script = (
        "import os; from pathlib import Path; from grader.sandbox.landlock import hide_folders\n"
        f"hidden, cache = Path({str(hidden)!r}), Path({str(cache)!r})\n"
        "assert hide_folders([hidden])\n"
        "os.replace(cache / 'tmp.1234' / 'kernel.cubin', cache / 'kernel.cubin')\n"
        "print((cache / 'kernel.cubin').read_text())\n"
        "os.replace(hidden / 'answers.txt', cache / 'answers.txt')\n"
    )
    completed = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert completed.stdout.strip() == "compiled", completed.stderr
    assert "OSError: [Errno 18]" in completed.stderr, completed.stderr
    assert (hidden / "answers.txt").read_text() == "42"


def test_output_past_the_file_size_limit_ends_the_worker_with_a_clear_reason(probe):
    with pytest.raises(SubmissionError) as raised:
        probe.function("shout")("x" * (FILE_SIZE_LIMIT_MB + 1) * 2**20)
    assert raised.value.kind == "crash"
    assert f"wrote more than {FILE_SIZE_LIMIT_MB} MiB" in raised.value.message
    probe.restart()


def test_a_thread_left_running_fails_the_call(probe):
    with pytest.raises(SubmissionError) as raised:
        probe.function("leave_a_thread")()
    assert raised.value.kind == "thread"
    assert "leave_a_thread returned but left a thread running (spinner)" in raised.value.message
    assert probe.function("shout")("fresh world") == 11


@pytest.mark.skipif(not signals_scoped(), reason="the kernel's Landlock cannot scope signals")
def test_a_hidden_folder_also_keeps_the_worker_from_signalling_the_grader(tmp_path):
    script = (
        "import os; from pathlib import Path; from grader.sandbox.landlock import hide_folders\n"
        f"assert hide_folders([Path({str(tmp_path)!r})])\n"
        "os.kill(os.getppid(), 0)\n"
    )
    completed = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert "PermissionError: [Errno 1] Operation not permitted" in completed.stderr, completed.stderr


def test_given_code_is_the_courses_definitions_without_the_students_parts():
    """What a worker re-installs over the student's file: the given helpers of zero's sharded.py
    (taken from the stub generated from solutions/), never a function the student writes."""
    code = given_code("zero", "sharded.py")
    defined = re.findall(r"^(?:def|class) (\w+)", code, re.MULTILINE)
    assert defined == ["partition_by_bytes", "state_bytes", "train_sharded"]
    assert "NotImplementedError" not in code and "BEGIN SOLUTION" not in code
    assert given_code("zero", "no_such_file.py") == ""


@pytest.mark.parametrize("order", ["flash_first", "reference_first"])
def test_given_code_is_the_courses_in_every_file_whatever_order_the_files_are_called_in(tmp_path, order):
    """A student redefines the given check_shapes of attention's reference.py, which
    flash_torch.py imports (`from reference import check_shapes`): both files must see the
    course's, whether flash_torch.py or reference.py is imported first."""
    module = load_course().module("attention")
    folder = tmp_path / "attention"
    shutil.copytree(ROOT / "solutions" / "attention", folder)
    with open(folder / "reference.py", "a") as file:
        file.write("\n\ndef check_shapes(q, k, v, causal):\n    raise RuntimeError('the student check_shapes ran')\n")
    q, k, v = (torch.randn(1, 2, 5, 4, dtype=torch.float64) for _ in range(3))
    calls = [("flash_attention_torch", (q, k, v)), ("attention", (q, k, v))]
    submission = Submission(module, folder)
    try:
        for name, args in calls if order == "flash_first" else calls[::-1]:
            out = submission.function(name)(*args)
            out = out[0] if isinstance(out, tuple) else out
            assert_matches(out, torch.nn.functional.scaled_dot_product_attention(q, k, v), name, 1e-9, 1e-9)
    finally:
        submission.close()


@pytest.mark.parametrize("edited", [False, True], ids=["left_as_given", "edited"])
def test_a_traceback_through_given_code_names_the_line_that_ran(tmp_path, edited):
    """quantization's given scale_rows raises, called from the student's quantize, in a file the
    student moved three lines down. Left as given, its frame is the student's file at the line it
    has there; edited, the course's version runs and its frame says so, at the pristine stub's
    line, with that line's source (never the student's line numbers for code that did not run)."""
    module = load_course().module("quantization")
    folder = tmp_path / "quantization"
    shutil.copytree(ROOT / "solutions" / "quantization", folder)
    source = "# moved\n#\n#\n" + (folder / "integer.py").read_text()
    raising = "    return x.reshape(-1, group_size)"
    if edited:
        source = source.replace(f"{raising}\n", f"    # mine\n{raising}\n")
    source += "\n\ndef quantize(x, *args, **kwargs):\n    return scale_rows(x, 'group', 0, 0)\n"
    (folder / "integer.py").write_text(source)
    submission = Submission(module, folder)
    try:
        with pytest.raises(SubmissionError) as failure:
            submission.function("quantize")(torch.ones(4))
    finally:
        submission.close()
    message = failure.value.message
    student_line = source.splitlines().index(raising) + 1
    stub_line = given_code("quantization", "integer.py").splitlines().index(raising) + 1
    caller = len(source.splitlines())
    assert f'File "quantization/integer.py", line {caller}, in quantize' in message, message
    if edited:
        shown = f'File "integer.py (the course\'s given code)", line {stub_line}, in scale_rows'
    else:
        shown = f'File "quantization/integer.py", line {student_line}, in scale_rows'
    assert shown in message and raising.strip() in message, message
