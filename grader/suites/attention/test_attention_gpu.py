"""Hidden suite, GPU only (`--device cuda`; skipped on a machine without one): the Triton
FlashAttention in bf16/fp16 (and float32, whose products must be exact, not TF32) against
torch.nn.functional.scaled_dot_product_attention, then its time against SDPA's, measured in the
same job. `make gpu-check` runs it.

How time is measured. Code in the student's process cannot be trusted to time itself, so CUDA
events are not recorded there. Instead the grader times (grader/sandbox/pool.py: from GO to the
reply) a script of R calls on R distinct input sets whose results stay on the device, closed by
one call on a tiny input whose result is copied back: that copy waits for every kernel queued
before it. SDPA is timed the same way in a trusted worker (attention_reference.sdpa_many). The R
distinct input sets (several times the 50-60 MB of L2) stand in for an L2 flush; interleaved
rounds, medians and retries (grader/perf.py) for repetition; the warm-up round JIT-compiles.
"""

from __future__ import annotations

import pytest
import torch

from grader.perf import Timing, best_ratio, interleaved_ratio, require_reliable
from grader.sandbox import Step
from grader.suites.attention.attention_reference import Case, check_against_reference, forward_backward

pytestmark = pytest.mark.gpu

GPU_CASES = [
    Case(2, 8, 2, 1000, 1000, 64, True, torch.bfloat16),
    Case(1, 8, 8, 513, 513, 128, False, torch.float16),
    Case(2, 4, 1, 7, 1031, 64, True, torch.bfloat16),  # MQA decode
    Case(1, 4, 4, 300, 300, 16, True, torch.float16),
    # float32 needs exact products (input_precision="ieee"): TF32 tensor cores round the inputs to a
    # 10-bit mantissa, errors of ~1e-3 that float32's tolerance refuses. The interpreter computes
    # tl.dot exactly either way, so only a GPU sees this.
    Case(1, 4, 2, 100, 130, 64, True, torch.float32),
]


@pytest.mark.points(4)
@pytest.mark.parametrize("case", GPU_CASES, ids=lambda c: c.id)
def test_flash_attention_triton_matches_sdpa_on_the_gpu(submission, case):
    mine, expected, _ = forward_backward(submission, "flash_attention_triton", case, "gpu")
    check_against_reference(
        mine, expected, case.dtype, f"flash_attention_triton on {case.described}", keys=("out", "lse")
    )
    check_against_reference(mine, expected, case.dtype, f"flash_attention_triton backward on {case.described}")


TIMED = Case(2, 16, 16, 4096, 4096, 64, True, torch.bfloat16)
LEADERBOARD = Case(1, 16, 16, 16384, 16384, 64, True, torch.bfloat16)  # CS336 2025: best student 5.36 ms (H100)
TINY = Case(1, 1, 1, 16, 16, 64, True, torch.bfloat16)
_measured: dict[tuple[str, str], object] = {}


def _student_seconds(submission, inputs, backward: bool) -> Timing:
    """Seconds per call of flash_attention_triton (forward, or forward + backward)."""
    if backward:
        steps = [Step("forward_backward", ("flash_attention_triton", *x, True), send_back=False) for x in inputs]
        steps.append(Step("forward_backward", ("flash_attention_triton", *TINY.inputs("tiny"), True)))
    else:
        steps = [Step("flash_attention_triton", x[:3], {"causal": True}, send_back=False) for x in inputs]
        steps.append(Step("flash_attention_triton", TINY.inputs("tiny")[:3], {"causal": True}))
    result = submission.script(steps, time_limit_s=300)
    return Timing(result.seconds / len(inputs), result.contention)


def _sdpa_seconds(library, inputs, backward: bool) -> Timing:
    target = "grader.suites.attention.attention_reference:sdpa_many"
    result = library.run(target, (inputs, True, backward), return_result=False)
    return Timing(result.seconds / len(inputs), result.contention)


def _ratio(submission, library, case: Case, mode: str, copies: int, limit: float):
    """Median time ratio flash_attention_triton / SDPA for `mode`, measured once per run."""
    if (case.id, mode) not in _measured:
        inputs = [case.inputs("timing", i) for i in range(copies)]
        backward = mode == "forward_backward"
        _measured[case.id, mode] = best_ratio(
            lambda: interleaved_ratio(
                lambda: _student_seconds(submission, inputs, backward),
                lambda: _sdpa_seconds(library, inputs, backward),
                rounds=3,
            ),
            limit,
        )
    return _measured[case.id, mode]


def _check(ratio, limit: float, case: Case, mode: str, record_property) -> None:
    record_property("time_ratio_vs_sdpa", round(ratio.ratio, 3))
    record_property("flash_attention_triton_ms", round(ratio.candidate_s * 1e3, 3))
    record_property("sdpa_ms", round(ratio.reference_s * 1e3, 3))
    require_reliable(ratio)
    assert ratio.ratio <= limit, (
        f"flash_attention_triton ({mode}, {case.id}) took {ratio.candidate_s * 1e3:.2f} ms, {ratio.ratio:.2f}x "
        f"SDPA ({ratio.reference_s * 1e3:.2f} ms); this check needs <= {limit:g}x. Skip the key blocks above "
        f"the diagonal, keep tiles on chip, and tune BLOCK_M/BLOCK_N and num_warps."
    )


# Points scale with the ratio to SDPA, in tiers set from the reference kernels' own ratio:
# within 2.5x of it earns the partial points, within 1.25x the rest (every tier passed adds its
# points). The tiers are ratios to SDPA measured in the same job, never absolute times.
# REFERENCE_RATIO is the reference's forward + backward time over SDPA's (the benchmark of
# `make gpu-check`, B=1 H=16 N=16384 d=64 bf16 causal). The kernels of issue 50 (split causal loop,
# exp2 with the scale folded into q, preprocess + dK/dV + dQ kernels, autotuned) were written
# without a GPU, so it is still the goal (<= 1.0x SDPA), not a measurement: the
# earlier kernels measured 1.86-1.93x on an H200 (torch 2.11, Triton 3.6). `make gpu-check`
# prints the measured ratio, and its gpu-tests fail while the reference misses a tier here
# (tests/test_attention_checks.py): set REFERENCE_RATIO from that table.
REFERENCE_RATIO = 1.0
PARTIAL = 2.5 * REFERENCE_RATIO
FULL = 1.25 * REFERENCE_RATIO
TIERS = [
    pytest.param(PARTIAL, marks=pytest.mark.points(4), id=f"within_{PARTIAL:g}x"),
    pytest.param(FULL, marks=pytest.mark.points(3), id=f"within_{FULL:g}x"),
]


@pytest.mark.perf
@pytest.mark.parametrize("mode", ["forward", "forward_backward"])
@pytest.mark.parametrize("limit", TIERS)
def test_flash_attention_triton_time_against_sdpa(submission, library, mode, limit, record_property):
    """TIMED (B=2, H=16, N=4096, d=64, bf16, causal): time per call over SDPA's, same job."""
    ratio = _ratio(submission, library, TIMED, mode, copies=4, limit=FULL)
    _check(ratio, limit, TIMED, mode, record_property)


@pytest.mark.perf
@pytest.mark.points(1)
def test_flash_attention_triton_leaderboard_configuration(submission, library, record_property):
    """B=1, H=16, N=16384, d=64, bf16, causal, forward + backward: the time is reported (the best
    student time on CS336's 2025 leaderboard, one H100, was 5.36 ms); passes within the partial
    tier (PARTIAL times SDPA)."""
    ratio = _ratio(submission, library, LEADERBOARD, "forward_backward", copies=3, limit=PARTIAL)
    record_property("leaderboard_ms", round(ratio.candidate_s * 1e3, 3))
    _check(ratio, PARTIAL, LEADERBOARD, "forward_backward", record_property)
