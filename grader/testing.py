"""Helpers for the course's tests (public and hidden): random inputs and comparisons whose
failure messages tell a student what differs and where. All of this runs in the grader."""

from __future__ import annotations

import hashlib
import os
import random
from collections.abc import Callable

import torch

from grader.sandbox.errors import SubmissionError

# One seed per grading run, random unless GRADER_SEED pins it, so inputs differ between runs
# (a hard-coded answer cannot pass) yet a failure can be replayed.
RUN_SEED = int(os.environ.get("GRADER_SEED", random.SystemRandom().randrange(2**31)))


def generator(*salt: object) -> torch.Generator:
    """A torch.Generator seeded from the run's seed and `salt` (e.g. the test's parameters)."""
    digest = hashlib.sha256(repr((RUN_SEED, *map(str, salt))).encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") % 2**63)


def random_tensor(shape: tuple[int, ...], dtype: torch.dtype, gen: torch.Generator) -> torch.Tensor:
    """Normal values for floating dtypes, integers in [-1000, 1000] otherwise; never all zeros."""
    if dtype.is_floating_point:
        return torch.randn(shape, generator=gen, dtype=torch.float64).to(dtype)
    return torch.randint(-1000, 1001, shape, generator=gen, dtype=dtype)


def tolerance(dtype: torch.dtype, terms: int = 1) -> tuple[float, float]:
    """(rtol, atol) for a sum of `terms` values added in a different order than the reference."""
    eps = torch.finfo(dtype).eps if dtype.is_floating_point else 0.0
    # Each addition may round once; values are O(1), sums O(sqrt(terms)).
    return 4 * terms * eps, 4 * terms * eps


def describe_difference(
    actual: torch.Tensor, expected: torch.Tensor, what: str, rtol: float = 0.0, atol: float = 0.0
) -> str | None:
    """None when `actual` matches `expected` (shape, dtype, values); else a one-paragraph reason."""
    if not isinstance(actual, torch.Tensor):
        return f"{what}: expected a tensor, got {type(actual).__name__}"
    if actual.shape != expected.shape:
        return f"{what}: shape {tuple(actual.shape)}, expected {tuple(expected.shape)}"
    if actual.dtype != expected.dtype:
        return f"{what}: dtype {actual.dtype}, expected {expected.dtype}"
    if actual.numel() == 0:
        return None
    a, e = actual.double(), expected.double()
    # NaN matches only NaN, and infinities only the same infinity: isclose alone would take a
    # NaN where the reference has one for a match, and treats inf as close to inf.
    both_nan = torch.isnan(a) & torch.isnan(e)
    bad = ~(torch.isclose(a, e, rtol=rtol, atol=atol) | both_nan) | (torch.isfinite(a) != torch.isfinite(e))
    if not bad.any():
        return None
    error = (a - e).abs().nan_to_num(nan=float("inf"))
    worst = int(torch.argmax(torch.where(bad, error, torch.zeros_like(error))))
    got, wanted = a.flatten()[worst].item(), e.flatten()[worst].item()
    # Values equal to 6 digits differ in their last bits: show them whole, and say why that is
    # usually so.
    digits, why = (".6g", "") if f"{got:.6g}" != f"{wanted:.6g}" else (".17g", _LAST_BITS)
    values = f"got {got:{digits}}, expected {wanted:{digits}}{why} (rtol={rtol:g}, atol={atol:g}; seed {RUN_SEED})"
    if actual.dim() == 0:
        return f"{what}: {values}"
    index = tuple(int(i) for i in torch.unravel_index(torch.tensor(worst), actual.shape))
    where = index if len(index) > 1 else index[0]
    return f"{what}: {int(bad.sum())} of {actual.numel()} elements differ; worst at index {where}: {values}"


_LAST_BITS = (
    ", equal to 6 digits: the last bits differ, as when the same numbers are added in another order "
    "(each rank summing its own way) or part of the computation ran at a lower precision"
)


def assert_matches(
    actual: torch.Tensor, expected: torch.Tensor, what: str, rtol: float = 0.0, atol: float = 0.0
) -> None:
    """Raise AssertionError (with describe_difference's reason) unless `actual` matches
    `expected`: same shape and dtype, values within tolerance, NaN and inf only where the
    reference has the same."""
    problem = describe_difference(actual, expected, what, rtol, atol)
    if problem:
        raise AssertionError(problem)


def expect_exception(exception_type: str, call: Callable[[], object]) -> SubmissionError:
    """Run `call` (a call into the submission) and require it to raise `exception_type`.

    Failures of another kind (not implemented, a crash, a timeout) are re-raised unchanged, so
    the student sees the real reason. A call that returns names the function and the arguments
    it was given.
    """
    from grader.sandbox.submission import last_call

    try:
        call()
    except SubmissionError as error:
        if error.kind != "exception":
            raise
        if error.exception_type != exception_type:
            raise AssertionError(f"expected {exception_type}, got:\n{error.message}") from None
        return error
    raise AssertionError(f"expected {exception_type}, but the call returned normally: {last_call()}")
