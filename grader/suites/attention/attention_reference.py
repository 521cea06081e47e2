"""Trusted references for the attention suite, computed in the grader (or a trusted worker) with
torch.nn.functional.scaled_dot_product_attention; never with the student's code.

SDPA's own `is_causal` aligns the mask to the top-left corner when seq_q != seq_k; the course
aligns it to the end of the keys (the decode case), so causal references pass an explicit
boolean mask instead.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from grader.sandbox import SubmissionError
from grader.sandbox.submission import Submission
from grader.testing import assert_matches, generator, random_tensor


@dataclass(frozen=True)
class Case:
    """One attention problem: shapes, masking and dtype."""

    batch: int
    heads: int
    kv_heads: int
    seq_q: int
    seq_k: int
    head_dim: int
    causal: bool
    dtype: torch.dtype = torch.float32

    @property
    def id(self) -> str:
        kind = "mha" if self.kv_heads == self.heads else "mqa" if self.kv_heads == 1 else "gqa"
        mask = "causal" if self.causal else "full"
        dtype = str(self.dtype).removeprefix("torch.")
        return f"{kind}-{mask}-q{self.seq_q}-k{self.seq_k}-d{self.head_dim}-{dtype}"

    @property
    def described(self) -> str:
        """The id, and for a causal case the mask convention a failure is measured against."""
        if not self.causal:
            return self.id
        offset = self.seq_k - self.seq_q
        return (
            f"{self.id} (causal, aligned to the END of the keys: query i sees keys j <= i + {offset}, "
            f"i.e. i + (seq_k - seq_q), as FlashAttention 2.1+ and decoding with a cache need; "
            f"not SDPA's is_causal, which aligns to the top-left)"
        )

    def inputs(self, *salt: object) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Random q, k, v and an upstream gradient for the output (never zeros)."""
        gen = generator(self.id, *salt)
        q = random_tensor((self.batch, self.heads, self.seq_q, self.head_dim), self.dtype, gen)
        k = random_tensor((self.batch, self.kv_heads, self.seq_k, self.head_dim), self.dtype, gen)
        v = random_tensor((self.batch, self.kv_heads, self.seq_k, self.head_dim), self.dtype, gen)
        grad_out = random_tensor((self.batch, self.heads, self.seq_q, self.head_dim), self.dtype, gen)
        return q, k, v, grad_out


def end_aligned_mask(seq_q: int, seq_k: int) -> torch.Tensor:
    """True where query i may see key j: j <= i + (seq_k - seq_q)."""
    return torch.ones(seq_q, seq_k, dtype=torch.bool).tril(seq_k - seq_q)


def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float | None = None) -> torch.Tensor:
    """F.scaled_dot_product_attention with the course's causal alignment and GQA."""
    mask = end_aligned_mask(q.shape[2], k.shape[2]).to(q.device) if causal else None
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=q.shape[1] != k.shape[1])


def sdpa_forward_backward(q, k, v, grad_out, causal: bool) -> dict[str, torch.Tensor]:
    """out, lse, dq, dk, dv in float64: autograd through SDPA; lse = logsumexp of the scores."""
    q, k, v = (t.detach().double().requires_grad_() for t in (q, k, v))
    out = sdpa(q, k, v, causal)
    out.backward(grad_out.double())
    group = q.shape[1] // k.shape[1]
    scores = q.detach() @ k.detach().repeat_interleave(group, dim=1).transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal:
        scores = scores.masked_fill(~end_aligned_mask(q.shape[2], k.shape[2]), float("-inf"))
    return {"out": out.detach(), "lse": scores.logsumexp(-1), "dq": q.grad, "dk": k.grad, "dv": v.grad}


# (rtol, atol) of each result against the float64 reference, by the dtype the student computed in.
TOLERANCES = {
    torch.float64: {"out": (1e-9, 1e-9), "grad": (1e-8, 1e-8)},
    torch.float32: {"out": (1e-4, 1e-5), "grad": (1e-4, 1e-4)},
    torch.float16: {"out": (1e-2, 5e-3), "grad": (2e-2, 1e-2)},
    torch.bfloat16: {"out": (3e-2, 2e-2), "grad": (5e-2, 5e-2)},
}


def forward_backward(
    submission: Submission, name: str, case: Case, *salt: object, measure=(), inputs: tuple | None = None
) -> tuple:
    """Run `name` forward and backward in the student's worker (through the given helper
    forward_backward of reference.py); return (results dict, reference dict, probe figures).
    `inputs` (q, k, v, grad_out) replaces case.inputs(*salt) where a test builds its own (views).

    A missing forward or backward is reported against `name` and its own file, not against the
    helper that called it."""
    q, k, v, grad_out = case.inputs(*salt) if inputs is None else inputs
    helper = submission.function("forward_backward")
    try:
        result = helper.run((name, q, k, v, grad_out, case.causal), measure=measure)
    except SubmissionError as error:
        if error.kind != "not_implemented":
            raise
        submission.function(name)(q, k, v, causal=case.causal)  # raises the forward's own message
        spec, lecture = submission.module.function(name), submission.module.lecture
        raise SubmissionError(
            "not_implemented",
            name,
            f"{name} is not implemented yet: its backward is missing; implement it in "
            f"{os.path.relpath(submission.directory / spec.file)} (see {lecture}, section {spec.section})",
        ) from None
    out, lse, dq, dk, dv = result.output
    mine = {"out": out, "lse": lse, "dq": dq, "dk": dk, "dv": dv}
    figures = result.measurements[0][0] if measure else {}
    return mine, sdpa_forward_backward(q, k, v, grad_out, case.causal), figures


def check_against_reference(
    mine: dict, expected: dict, dtype: torch.dtype, what: str, keys: tuple[str, ...] = ("out", "dq", "dk", "dv")
) -> None:
    """Each result named in `keys` against the float64 reference, with `dtype`'s tolerance. lse
    is expected in float32 (float64 for float64 inputs)."""
    for key in keys:
        if mine[key] is None:
            raise AssertionError(f"{what}: no {key} was returned")
        if key == "lse":
            reference, tol = expected[key].to(torch.float64 if dtype == torch.float64 else torch.float32), "out"
        else:
            reference, tol = expected[key].to(dtype), "out" if key == "out" else "grad"
        assert_matches(mine[key], reference, f"{what}: {key}", *TOLERANCES[dtype][tol])


def sdpa_many(inputs: list[tuple[torch.Tensor, ...]], causal: bool, backward: bool) -> None:
    """Trusted, for GPU timing: SDPA forward (and backward) on each input set in turn, then wait
    for the device. Runs in a trusted worker, whose clock times it like a student's script."""
    for q, k, v, grad_out in inputs:
        q, k, v = (t.requires_grad_(backward) for t in (q, k, v))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=q.shape[1] != k.shape[1])
        if backward:
            out.backward(grad_out)
    torch.cuda.synchronize()
