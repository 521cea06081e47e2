"""The GPU kernels' benchmark (grader/bench/kernels.py) on a machine without a GPU: `make
gpu-check`'s table (`python -m grader.bench.kernels`) and `make bench`'s rows for attention and
quantization each say "no GPU" for both kernels, and nothing is measured (no kernel runs). On a GPU
`make gpu-check` runs the measured path."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import pytest
from conftest import ROOT
from rich.console import Console

from grader.bench import attention, kernels, quantization
from grader.course import load_course

KERNELS = ("FlashAttention-2 fwd+bwd, causal, bf16", "W4A16, group 128")


def _rows(text: str) -> dict[str, str]:
    """The table lines naming each benchmark's kernel."""
    return {kernel: line for kernel in KERNELS for line in text.splitlines() if kernel in line}


def test_gpu_check_benchmark_prints_no_gpu_for_both_kernels_on_a_cpu():
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}  # the CPU path even on a machine with a GPU
    done = subprocess.run(
        [sys.executable, "-m", "grader.bench.kernels"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "device: no GPU" in done.stdout and "triton" in done.stdout, done.stdout
    rows = _rows(done.stdout)
    assert set(rows) == set(KERNELS), done.stdout
    for kernel, line in rows.items():
        assert line.count("no GPU") == 3, f"{kernel}: ours, reference and ratio should read 'no GPU': {line}"
    assert "<= 1.0x SDPA fwd+bwd" in rows[KERNELS[0]] and "<= 1.5x bf16 matmul" in rows[KERNELS[1]], rows


@pytest.mark.parametrize(
    ("bench", "kernel"), [(attention, KERNELS[0]), (quantization, KERNELS[1])], ids=["attention", "quantization"]
)
def test_make_bench_row_reads_no_gpu_and_measures_nothing_on_a_cpu(monkeypatch, bench, kernel):
    def measured(*_):
        raise AssertionError("a benchmark ran without a GPU")

    monkeypatch.setattr(kernels.torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(kernels, "BENCHMARKS", [dataclasses.replace(b, measure=measured) for b in kernels.BENCHMARKS])
    console = Console(width=160, record=True)
    console.print(bench.table(load_course(ROOT)))
    rows = _rows(console.export_text())
    assert list(rows) == [kernel], rows
    assert rows[kernel].count("no GPU") == 3, rows[kernel]
