"""Hidden suite: cp_comm_bytes and ring_overlap_condition against the formulas derived from the
algorithms (reference.py), and the errors every distributed function raises on every rank
for inputs that do not fit (so no rank is left waiting)."""

from __future__ import annotations

import re

import pytest
import torch

from grader.sandbox import Step
from grader.suites.context_parallel import reference
from grader.testing import expect_exception, generator

COST_CASES = [
    (variant, s, b, h_q, h_kv, d, p, e)
    for variant in ("ring", "ulysses", "allgather_kv")
    for (s, b, h_q, h_kv, d, p, e) in (
        (32, 2, 8, 4, 8, 4, 8),
        (131072, 1, 32, 8, 128, 8, 2),
        (4096, 3, 16, 16, 64, 2, 4),
        (1000, 1, 4, 1, 16, 1, 2),
        (12, 1, 3, 2, 5, 4, 1),  # heads that do not split over p: Ulysses' count is floored (112.5 -> 112)
        (18, 3, 9, 3, 6, 3, 8),  # p = 3, no size a power of two
        (6, 1, 4, 1, 5, 6, 1),  # p = 6, one position per rank: Ulysses' 5 * 50 / 6 = 41.67 is floored to 41
    )
]


@pytest.mark.points(4)
def test_cp_comm_bytes_matches_the_algorithms(submission):
    got = submission.script(
        [Step("cp_comm_bytes", case) for case in COST_CASES]
        + [Step("cp_comm_bytes", ("ring", 64, 1, 4, 2, 8, 4, torch.bfloat16))]
    ).steps[0]
    for case, answer in zip(COST_CASES, got):
        want = reference.cp_comm_bytes(*case)
        assert tuple(answer) == want, (
            f"cp_comm_bytes{case}: returned {tuple(answer)}; the algorithm sends {want} (forward, backward) per rank"
        )
        assert all(type(n) is int for n in answer), (
            f"cp_comm_bytes{case}: returned {tuple(answer)}, of types {[type(n).__name__ for n in answer]}: "
            "the docstring promises exact integers (a / where // belongs gives floats)"
        )
    want = reference.cp_comm_bytes("ring", 64, 1, 4, 2, 8, 4, 2)
    assert tuple(got[-1]) == want, (
        f"cp_comm_bytes with torch.bfloat16 (2 bytes): returned {tuple(got[-1])}, want {want}"
    )


@pytest.mark.points(2)
def test_cp_comm_bytes_refuses_an_unknown_variant_and_a_sequence_that_does_not_split(submission):
    # "zigzag" is cp_step's name for the zigzag ring, not a variant of cp_comm_bytes (its bytes are "ring"'s)
    # s = 30 on 4 ranks and s = 20 on 3 ranks do not split (30 and 20 are even: s % 2 passes both)
    refused = (
        ("tree", 32, 1, 4, 4, 8, 4, 2),
        ("zigzag", 32, 1, 4, 4, 8, 4, 2),
        ("ring", 30, 1, 4, 4, 8, 4, 2),
        ("allgather_kv", 20, 1, 3, 3, 8, 3, 2),
    )
    for args in refused:
        try:
            expect_exception("ValueError", lambda args=args: submission.function("cp_comm_bytes")(*args))
        except AssertionError as error:
            raise AssertionError(f"cp_comm_bytes{args}: {error}") from None


OVERLAP_CASES = [
    (1, 32, 8, 128, 2, 989e12, 0.0, 1 / 50e9),
    (1, 32, 32, 128, 2, 989e12, 5e-6, 1 / 50e9),
    (2, 16, 2, 64, 4, 1e12, 1e-5, 1e-9),
    (1, 8, 8, 64, 2, 1e12, 1e-5, 0.0),  # beta = 0 is allowed: latency alone, sqrt(alpha / quadratic)
    (1, 8, 8, 64, 2, 1e12, 0.0, 0.0),  # both zero: any block hides its transfer, s_local = 0
    (3, 12, 3, 96, 1, 312e12, 2e-6, 1 / 25e9),  # no size a power of two, one-byte elements
    (1, 2, 1, 4, 2, 0.5, 1e-3, 1e-3),  # half a FLOP per second: slow, but > 0 is all the docstring asks
]


@pytest.mark.points(3)
def test_ring_overlap_condition_is_the_root_of_compute_equals_transfer(submission):
    in_bfloat16 = (1, 32, 8, 128, torch.bfloat16, 989e12, 5e-6, 1 / 50e9)  # element_bytes as a dtype: 2
    cases = [*OVERLAP_CASES, in_bfloat16]
    got = submission.script([Step("ring_overlap_condition", case) for case in cases]).steps[0]
    for case, answer in zip(cases, got):
        want = reference.ring_overlap_condition(*case[:4], 2 if case is in_bfloat16 else case[4], *case[5:])
        assert answer == pytest.approx(want, rel=1e-9, abs=1e-12), (
            f"ring_overlap_condition{case}: returned {answer}, want {want}"
        )


@pytest.mark.points(1)
def test_ring_overlap_condition_refuses_impossible_hardware(submission):
    # no FLOPs per second, a negative latency (small: the formula's square root would still exist,
    # so only the check refuses it), a negative time per byte
    impossible = [(1, 8, 8, 64, 2, *h) for h in ((0.0, 0.0, 1e-9), (1e12, -1e-12, 1e-9), (1e12, 0.0, -1e-9))]
    for args in impossible:
        try:
            expect_exception("ValueError", lambda args=args: submission.function("ring_overlap_condition")(*args))
        except AssertionError as error:
            raise AssertionError(f"ring_overlap_condition{args}: {error}") from None


def _qkv(h_q: int, h_kv: int, s: int, d: int = 4, d_k: int | None = None):
    gen = generator("cp-bad", h_q, h_kv, s, d)
    q = torch.randn(1, h_q, s, d, generator=gen, dtype=torch.float64)
    k = torch.randn(1, h_kv, s, d_k or d, generator=gen, dtype=torch.float64)
    return q, k, k.clone()


def _expect_value_error(call, what: str, names: tuple[str, ...]) -> None:
    try:
        error = expect_exception("ValueError", call)
    except AssertionError as failure:
        raise AssertionError(f"{what}: {failure}") from None
    message = error.message.lower()
    # A one-letter argument (q, k, v) must stand as a word ("k's", "k of shape"), not as any letter k.
    words = [re.compile(rf"\b{re.escape(name)}" + (r"\b" if len(name) == 1 else "")) for name in names]
    assert any(word.search(message) for word in words), (
        f"{what}: the ValueError must name the argument ({' or '.join(names)}); it said: {error.message[-400:]}"
    )


@pytest.mark.points(2)
def test_ulysses_refuses_heads_that_do_not_split_over_the_ranks(submission):
    """ValueError naming q (3 heads on 2 ranks, 4 heads on 3 ranks) or k (1 kv head on 2 ranks),
    on every rank."""
    q, k, v = _qkv(3, 3, 4)
    _expect_value_error(
        lambda: submission.function("cp_step").spmd(2, [("ulysses", q, k, v)] * 2),
        "ulysses_attention with 3 heads on 2 ranks",
        ("q", "head"),
    )
    q, k, v = _qkv(4, 1, 4)
    _expect_value_error(
        lambda: submission.function("cp_step").spmd(2, [("ulysses", q, k, v)] * 2),
        "ulysses_attention with 4 query heads and 1 kv head on 2 ranks",
        ("k", "kv head"),
    )
    # 4 heads on 3 ranks: even, a power of two, and still not a multiple of p
    q, k, v = _qkv(4, 4, 3)
    _expect_value_error(
        lambda: submission.function("cp_step").spmd(3, [("ulysses", q, k, v)] * 3),
        "ulysses_attention with 4 heads on 3 ranks",
        ("q", "head"),
    )


@pytest.mark.points(2)
def test_zigzag_refuses_a_sequence_that_does_not_split_into_2p_chunks(submission):
    """ValueError from zigzag_shard (6 positions on 2 ranks), zigzag_unshard (a shard of 3) and
    ring_attention(layout="zigzag") with an odd s_local."""
    x = torch.zeros(1, 2, 6, 4, dtype=torch.float64)
    _expect_value_error(
        lambda: submission.function("zigzag_shard").spmd(2, [(x,)] * 2),
        "zigzag_shard of 6 positions on 2 ranks",
        ("sequence", "position", "dim"),
    )
    q, k, v = _qkv(2, 2, 3)
    _expect_value_error(
        lambda: submission.function("ring_step").spmd(2, [(q, k, v)] * 2, {"layout": "zigzag"}),
        "ring_attention(layout='zigzag') with s_local = 3",
        ("s_local", "chunk", "odd"),
    )
    x = torch.zeros(1, 2, 3, 4, dtype=torch.float64)
    _expect_value_error(
        lambda: submission.function("zigzag_unshard").spmd(2, [(x,)] * 2),
        "zigzag_unshard of a 3-position shard",
        ("chunk", "odd", "dim"),
    )


@pytest.mark.points(2)
def test_every_variant_refuses_k_and_v_that_do_not_fit_q(submission):
    """ValueError naming k (or v) for k of another d than q, v of other heads than k; and from
    ring_attention for an unknown layout."""
    q, k, v = _qkv(2, 2, 4, d=4, d_k=2)
    _expect_value_error(
        lambda: submission.function("ring_step").spmd(2, [(q, k, v)] * 2),
        "ring_attention with k's d = 2, q's d = 4",
        ("k",),
    )
    for variant in ("ulysses", "allgather_kv"):
        _expect_value_error(
            lambda variant=variant: submission.function("cp_step").spmd(2, [(variant, q, k, v)] * 2),
            f"{variant} with k's d = 2, q's d = 4",
            ("k",),
        )
    q, k, _ = _qkv(2, 2, 4)
    _expect_value_error(
        lambda: submission.function("ring_step").spmd(2, [(q, k, k[:, :1])] * 2),
        "ring_attention with v's heads 1, k's 2",
        ("v",),
    )
    _expect_value_error(
        lambda: submission.function("ring_step").spmd(2, [(q, k, k)] * 2, {"layout": "striped"}),
        "ring_attention(layout='striped')",
        ("layout",),
    )
