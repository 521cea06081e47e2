"""`python -m grader watch`: one warm process grades a module's public tests, and again on every
save (grader/watch.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading

from conftest import ROOT


def _until(stream, word: str, timeout: float = 300) -> str:
    """Lines of `stream` up to and including the first that contains `word`."""
    lines: list[str] = []
    done = threading.Event()

    def read() -> None:
        for line in stream:
            lines.append(line)
            if word in line:
                break
        done.set()

    threading.Thread(target=read, daemon=True).start()
    assert done.wait(timeout), f"no line with {word!r} within {timeout:g} s:\n{''.join(lines)}"
    return "".join(lines)


def test_watch_grades_now_and_again_after_a_save(tmp_path):
    folder = tmp_path / "submission" / "collectives"
    shutil.copytree(ROOT / "assignments" / "collectives", folder, ignore=shutil.ignore_patterns("*.ipynb"))
    command = [sys.executable, "-m", "grader", "watch", "collectives", "--submission", str(folder.parent)]
    command += ["-k", "allreduce_time", "--max-gradings", "2"]
    with subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as watch:
        try:
            first = _until(watch.stdout, "watching")
            assert "allreduce_time is not implemented yet" in first, first
            assert "0.0 / 100" in first, first
            written = folder / "cost_model.py"
            shutil.copy(ROOT / "solutions" / "collectives" / "cost_model.py", written)
            os.utime(written)  # a save, whatever the copy kept of the original's time
            second = _until(watch.stdout, "watching")
            assert "100.0 / 100" in second and "allreduce_time is not implemented" not in second, second
            assert "verdict" in second and "s after the save" in second, second
            assert watch.wait(timeout=60) == 0
        finally:
            watch.kill()
