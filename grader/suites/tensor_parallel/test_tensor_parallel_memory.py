"""Hidden suite: tp_activation_bytes against table 2 of Korthikanti et al. 2022, "Reducing
Activation Recomputation in Large Transformer Models": the per-layer figures of the paper's four
configurations (table 3: sequence 2048; 22B: 64 heads, h 6144, t 8, micro-batch 4; 175B: 96,
12288, 8, 1; 530B: 128, 20480, 8, 1; 1T: 160, 25600, 8, 1), every branch of the formula, t = 1,
sizes that do not divide, and bad input."""

from __future__ import annotations

import math

import pytest

from grader.testing import expect_exception

# (s, b, h, a, t) -> bytes per layer: TP, TP+SP, TP+selective, TP+SP+selective; and t = 1.
PAPER = {
    "22B": ((2048, 4, 6144, 64, 8), (1325400064, 884998144, 654311424, 213909504), 7079985152),
    "175B": ((2048, 1, 12288, 96, 8), (578813952, 358612992, 327155712, 106954752), 2868903936),
    "530B": ((2048, 1, 20480, 128, 8), (880803840, 513802240, 545259520, 178257920), 4110417920),
    "1T": ((2048, 1, 25600, 160, 8), (1101004800, 642252800, 681574400, 222822400), 5138022400),
}
FLAGS = [(False, False), (True, False), (False, True), (True, True)]


def _name(flags: tuple[bool, bool]) -> str:
    return f"sequence_parallel={flags[0]}, selective_recompute={flags[1]}"


@pytest.mark.points(4)
@pytest.mark.parametrize("model", list(PAPER))
def test_tp_activation_bytes_reproduces_the_papers_configurations(submission, model):
    (s, b, h, a, t), figures, unsplit = PAPER[model]
    formula = submission.function("tp_activation_bytes")
    for flags, want in zip(FLAGS, figures):
        got = formula(s, b, h, a, t, *flags)
        assert got == want, (
            f"{model} (s={s}, b={b}, h={h}, a={a}, t={t}), {_name(flags)}: got {got!r} bytes per layer, "
            f"expected {want} (table 2 of Korthikanti et al. 2022, 2-byte activations)"
        )
    got = formula(s, b, h, a, 1, False, False)
    assert got == unsplit, f"{model} with t=1: got {got!r}, expected sbh(34 + 5as/h) = {unsplit}"


@pytest.mark.points(2)
def test_tp_activation_bytes_every_branch_on_sizes_that_do_not_divide(submission):
    """s=7, b=3, h=10, a=5, t=3: 24/t and 5as/(ht) are fractions; t=8: every sequence-parallel
    figure is a fraction too (an integer division is caught); t=1 makes every branch equal to no
    parallelism (selective: sbh * 34)."""
    s, b, h, a = 7, 3, 10, 5
    sbh, core = s * b * h, 5 * a * s * s * b
    formula = submission.function("tp_activation_bytes")
    for t in (1, 3, 8):
        expected = {
            (False, False): 10 * sbh + (24 * sbh + core) / t,
            (True, False): (34 * sbh + core) / t,
            (False, True): 10 * sbh + 24 * sbh / t,
            (True, True): 34 * sbh / t,
        }
        for flags, want in expected.items():
            got = formula(s, b, h, a, t, *flags)
            assert math.isclose(got, want, rel_tol=1e-12), (
                f"tp_activation_bytes(s={s}, b={b}, h={h}, a={a}, t={t}, {_name(flags)}): got {got!r}, expected {want}"
            )


@pytest.mark.points(1)
def test_tp_activation_bytes_defaults_to_tensor_parallelism_alone(submission):
    got = submission.function("tp_activation_bytes")(2048, 1, 12288, 96, 8)
    assert isinstance(got, float), f"tp_activation_bytes returns a float, got {type(got).__name__}"
    assert got == 578813952, f"tp_activation_bytes(2048, 1, 12288, 96, 8): got {got!r}, expected 578813952"


BAD = {
    "s=0": (0, 1, 8, 2, 2),
    "b=-1": (4, -1, 8, 2, 2),
    "h=2.5": (4, 1, 2.5, 2, 2),
    "a=0": (4, 1, 8, 0, 2),
    "t=0": (4, 1, 8, 2, 0),
}


@pytest.mark.points(1)
@pytest.mark.parametrize("case", list(BAD))
def test_tp_activation_bytes_refuses_sizes_that_are_not_positive_integers(submission, case):
    try:
        expect_exception("ValueError", lambda: submission.function("tp_activation_bytes")(*BAD[case]))
    except AssertionError as error:
        raise AssertionError(f"tp_activation_bytes{BAD[case]}: {error}") from None
