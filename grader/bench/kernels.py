"""The course's GPU kernels beside the library call a user would otherwise make, timed in the
same run with triton.testing.do_bench (a warm-up, then the L2 cache flushed before every timed
call; the median of the calls). `make gpu-check` prints both rows in one table (`python -m
grader.bench.kernels`); `make bench` prints each module's row (grader/bench/attention.py,
grader/bench/quantization.py). Without a CUDA device each row reads "no GPU" and nothing runs.

- FlashAttention-2 (attention/flash_triton.py), forward + backward, causal, bf16, B=1 H=16
  N=16384 d=64, against torch's scaled_dot_product_attention forward + backward (FlashAttention
  or cuDNN kernels). Goal: at most 1.0x.
- W4A16 (quantization/linear.py: w4a16_matmul), int4 weight in groups of 128, M x N x K =
  16 x 8192 x 8192, against a bf16 matmul x @ W.T of the same shape (cuBLAS). Goal: at most 1.5x.

The ratios set the tiers of the hidden suites' timed checks (REFERENCE_RATIO in
grader/suites/attention/test_attention_gpu.py, W4A16_REFERENCE_RATIO in
grader/suites/quantization/test_quantization_linear.py).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table

from grader.course import COURSE_ROOT, Course, load_solution

NO_GPU = "no GPU"


@dataclass(frozen=True)
class Benchmark:
    module: str
    kernel: str
    shape: str
    reference: str  # the library call it is timed against
    goal: float  # at most this many times the reference's time
    measure: Callable[[Path], tuple[float, float]]  # (ours ms, reference ms), given solutions/


def _do_bench(fn: Callable[[], object]) -> float:
    """Median milliseconds of fn on the GPU: triton.testing.do_bench warms up, then clears the L2
    cache (writes a 256 MB buffer) before each timed call. The first call compiles and autotunes."""
    from triton.testing import do_bench

    fn()
    torch.cuda.synchronize()
    return do_bench(fn, warmup=25, rep=200, return_mode="median")


def _flash_attention(solutions: Path) -> tuple[float, float]:
    flash = load_solution("attention", "flash_triton.py", solutions).flash_attention_triton
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v, grad_out = (
        torch.randn(1, 16, 16384, 64, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(4)
    )
    q, k, v = (t.requires_grad_() for t in (q, k, v))

    def ours() -> object:
        out, _ = flash(q, k, v, causal=True)
        return torch.autograd.grad(out, (q, k, v), grad_out)

    def sdpa() -> object:
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return torch.autograd.grad(out, (q, k, v), grad_out)

    return _do_bench(ours), _do_bench(sdpa)


def _w4a16(solutions: Path) -> tuple[float, float]:
    w4a16_matmul = load_solution("quantization", "linear.py", solutions).w4a16_matmul
    m, n, k, group = 16, 8192, 8192, 128
    gen = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randint(-8, 8, (n, k), device="cuda", generator=gen, dtype=torch.int32)
    scale = torch.rand(n, k // group, device="cuda", generator=gen) * 0.01 + 0.001
    nibbles = (q & 0xF).reshape(-1, 2)
    packed = (nibbles[:, 0] | (nibbles[:, 1] << 4)).to(torch.uint8)
    weight = (q.float() * scale.repeat_interleave(group, dim=1)).bfloat16()
    x = torch.randn(m, k, device="cuda", generator=gen).bfloat16()
    return _do_bench(lambda: w4a16_matmul(x, packed, scale, group)), _do_bench(lambda: x @ weight.T)


BENCHMARKS = [
    Benchmark(
        "attention", "FlashAttention-2 fwd+bwd, causal, bf16", "B1 H16 N16384 d64", "SDPA fwd+bwd", 1.0,
        _flash_attention,
    ),
    Benchmark(
        "quantization", "W4A16, group 128", "16 x 8192 x 8192", "bf16 matmul", 1.5, _w4a16,
    ),
]  # fmt: skip


def _driver_version() -> str:
    """The NVIDIA driver's version, as nvidia-smi reports it ("unknown" without nvidia-smi)."""
    try:
        found = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return found.stdout.strip().splitlines()[0] if found.stdout.strip() else "unknown"


def device_line() -> str:
    """The device, driver, CUDA, torch and triton versions the rows were measured with."""
    import triton

    versions = f"torch {torch.__version__}, triton {triton.__version__}"
    if not torch.cuda.is_available():
        return f"device: {NO_GPU} (torch sees no CUDA device); {versions}"
    return f"device: {torch.cuda.get_device_name()}, driver {_driver_version()}, CUDA {torch.version.cuda}; {versions}"


def table(modules: list[str], solutions: Path = COURSE_ROOT / "solutions") -> Table:
    """One row per benchmark of `modules`: ours ms, reference ms, ratio and the goal; every
    measured cell reads "no GPU" where torch sees no CUDA device (nothing is imported or run)."""
    result = Table(
        title=f"GPU kernels: reference Triton kernel vs library, do_bench median (L2 flushed)\n{device_line()}"
    )
    for column in ("kernel", "shape", "ours ms", "reference ms", "ratio", "goal"):
        result.add_column(column, justify="left" if column in ("kernel", "shape", "goal") else "right")
    gpu = torch.cuda.is_available()
    for bench in (b for b in BENCHMARKS if b.module in modules):
        goal = f"<= {bench.goal:.1f}x {bench.reference}"
        if not gpu:
            result.add_row(bench.kernel, bench.shape, NO_GPU, NO_GPU, NO_GPU, goal)
            continue
        ours, reference = bench.measure(solutions)
        ratio = ours / reference
        verdict = "met" if ratio <= bench.goal else "missed"
        result.add_row(
            bench.kernel, bench.shape, f"{ours:.4g}", f"{reference:.4g}", f"{ratio:.2f}x", f"{goal} ({verdict})"
        )
    return result


def module_table(course: Course, module: str) -> Table:
    """`make bench`'s table for one module (its row of BENCHMARKS)."""
    return table([module], course.root / "solutions")


def main() -> int:
    Console(width=160).print(table([b.module for b in BENCHMARKS]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
