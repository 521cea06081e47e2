"""Hidden suite: zero_memory_per_rank against the ZeRO paper (Rajbhandari et al., 2020, figure 1
and section 5): 2 + 2 + K bytes per parameter, the last parts divided by the world size; and,
deterministically, every stage for parameter, gradient and optimizer byte counts that all differ
(no two ways of splitting them agree), on 3, 5, 6 and 7 ranks and 1, with parameter counts the
world size does not divide."""

from __future__ import annotations

import math

import pytest

from grader.sandbox import Step
from grader.testing import expect_exception


@pytest.mark.points(6)
def test_zero_memory_reproduces_the_papers_worked_example(submission):
    """7.5B parameters, 64 GPUs, mixed-precision Adam (K = 12): 120, 31.4, 16.6, 1.88 GB."""
    memory = submission.function("zero_memory_per_rank")
    expected = [120e9, 31.40625e9, 16.640625e9, 1.875e9]
    for stage, want in enumerate(expected):
        got = memory(7_500_000_000, 64, stage)
        assert math.isclose(got, want, rel_tol=1e-9), (
            f"stage {stage}: got {got:.4g} bytes, the paper gives {want:.4g} (psi = 7.5e9, N_d = 64, K = 12)"
        )


@pytest.mark.points(3)
def test_zero_memory_uses_the_given_byte_counts(submission):
    """fp32 training with plain SGD: 4 + 4 + 0 bytes per parameter; Adam in fp32: K = 8."""
    memory = submission.function("zero_memory_per_rank")
    cases = [
        ((1000, 4, 2, 4, 4, 0), 1000 * (4 + 4 / 4)),
        ((1000, 4, 1, 4, 4, 8), 1000 * (4 + 4 + 8 / 4)),
        ((1000, 8, 3, 2, 2, 12), 1000 * 16 / 8),
        ((1000, 1, 2), 16000),
    ]
    for args, want in cases:
        got = memory(*args)
        assert math.isclose(got, want, rel_tol=1e-9), f"zero_memory_per_rank{args}: got {got}, expected {want}"


@pytest.mark.points(1)
def test_zero_memory_rejects_an_unknown_stage(submission):
    expect_exception("ValueError", lambda: submission.function("zero_memory_per_rank")(1000, 4, 4))


# Byte counts (P, G, K) whose 8 subset sums all differ: a stage's line divides one subset by p,
# so each stage's formula and every other way of splitting the three terms (stage 2's line for
# stage 1, the gradient's count where the optimizer's belongs, ...) gives another number. The
# paper's counts cannot tell P from G (both 2), nor any swap of equal counts.
DISTINCT_COUNTS = [(2, 3, 7), (4, 1, 10), (1, 2, 12)]
# World sizes that are not powers of two, parameter counts they do not divide (997 is prime,
# 1001 = 7 * 11 * 13), fewer parameters than ranks, and p = 1 (every stage the same)
WORLDS = [(1001, 3), (997, 5), (1001, 6), (997, 7), (5, 7), (1001, 1)]
TERMS = ("P", "G", "K")
SHARDED = {0: (), 1: ("K",), 2: ("G", "K"), 3: ("P", "G", "K")}  # the terms each stage divides by p
SPLITS = [tuple(t for i, t in enumerate(TERMS) if mask >> i & 1) for mask in range(8)]  # every way to divide


def split_formula(counts: dict[str, int], sharded: tuple[str, ...], psi: int, p: int) -> float:
    return sum(counts[t] * psi / p if t in sharded else counts[t] * psi for t in TERMS)


def formula_text(sharded: tuple[str, ...]) -> str:
    kept = " + ".join(t for t in TERMS if t not in sharded) or "0"
    split = " + ".join(sharded) or "0"
    return f"({kept}) * Psi + ({split}) * Psi / p"


@pytest.mark.points(4)
def test_zero_memory_divides_each_stages_own_terms_when_every_byte_count_differs(submission):
    """Every stage for parameter, gradient and optimizer counts that all differ, on 3, 5, 6
    and 7 ranks (and 1), with parameter counts the world size does not divide: the exact
    quotient, never rounded. A wrong answer is named by the split of terms it matches."""
    cases = [(psi, p, stage, *counts) for counts in DISTINCT_COUNTS for psi, p in WORLDS for stage in SHARDED]
    answers = submission.script([Step("zero_memory_per_rank", args) for args in cases]).steps[0]
    for args, got in zip(cases, answers):
        psi, p, stage, *_ = args
        counts = dict(zip(TERMS, args[3:]))
        want = split_formula(counts, SHARDED[stage], psi, p)
        number = isinstance(got, (int, float)) and not isinstance(got, bool)
        if number and math.isclose(got, want, rel_tol=1e-9):
            continue
        matches = [s for s in SPLITS if number and math.isclose(got, split_formula(counts, s, psi, p), rel_tol=1e-9)]
        seen = f", which is {formula_text(matches[0])}" if matches and p > 1 else ""
        pytest.fail(
            f"zero_memory_per_rank{tuple(args)} (Psi = {psi}, p = {p}, P = {counts['P']}, G = {counts['G']}, "
            f"K = {counts['K']}): expected stage {stage}'s {formula_text(SHARDED[stage])} = {want!r}, got {got!r}"
            f"{seen} (memory.py's module docstring: each byte count in its own term, Psi / p exact, not rounded)"
        )
