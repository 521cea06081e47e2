"""Trusted references of the context_parallel suite: attention on the whole sequence by torch's
SDPA in float64 (never imported from a submission), how the ranks' shards are cut, the bytes
each variant sends (derived from the algorithms; lecture 11, section 7), the library's own
collectives of Ulysses and all-gathered K/V for the byte baselines, and the runs of the
equality checks that the counted checks read (one call per world size)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F

from grader.sandbox import Step
from grader.testing import generator

BATCH, S_LOCAL, HEAD_DIM = 2, 8, 8  # s = 8p positions: s_local = 8, one score block 8 x 8
HEADS = {"mha": (4, 4), "gqa": (8, 4)}
VARIANTS = ("ring", "zigzag", "ulysses", "allgather_kv")
RING_PROBES = ("largest", "flops", "p2p")


@dataclass(frozen=True)
class Case:
    variant: str
    heads: str  # "mha" or "gqa"
    causal: bool

    @property
    def id(self) -> str:
        return f"{self.variant}-{self.heads}-{'causal' if self.causal else 'full'}"


CASES = [Case(v, h, c) for v in VARIANTS for h in HEADS for c in (False, True)]


def make_data(p: int, heads: str, *salt: object) -> dict[str, torch.Tensor]:
    """Whole-sequence q, k, v and the output's gradient, float64, s = S_LOCAL * p."""
    h_q, h_kv = HEADS[heads]
    gen = generator("cp-data", p, heads, *salt)
    s = S_LOCAL * p
    q = torch.randn(BATCH, h_q, s, HEAD_DIM, generator=gen, dtype=torch.float64)
    k = torch.randn(BATCH, h_kv, s, HEAD_DIM, generator=gen, dtype=torch.float64)
    v = torch.randn(BATCH, h_kv, s, HEAD_DIM, generator=gen, dtype=torch.float64)
    grad = torch.randn(BATCH, h_q, s, HEAD_DIM, generator=gen, dtype=torch.float64)
    return {"q": q, "k": k, "v": v, "grad": grad}


def sdpa_reference(data: dict[str, torch.Tensor], causal: bool) -> dict[str, torch.Tensor]:
    """Output and the gradients of q, k, v on the whole sequence: F.scaled_dot_product_attention."""
    q, k, v = (data[n].clone().requires_grad_(True) for n in "qkv")
    out = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
    out.backward(data["grad"])
    return {"output": out.detach(), "grad_q": q.grad, "grad_k": k.grad, "grad_v": v.grad}


def zigzag(x: torch.Tensor, p: int, rank: int, dim: int = 2) -> torch.Tensor:
    chunks = x.chunk(2 * p, dim=dim)
    return torch.cat([chunks[rank], chunks[2 * p - 1 - rank]], dim=dim)


def cut(x: torch.Tensor, variant: str, p: int, rank: int) -> torch.Tensor:
    """Group rank `rank`'s shard of a whole-sequence tensor in the variant's layout."""
    if variant == "zigzag":
        return zigzag(x, p, rank)
    return x.chunk(p, dim=2)[rank].contiguous()


def step_for(case: Case, data: dict[str, torch.Tensor], p: int, rank: int, group=None, probes=True) -> Step:
    q, k, v, grad = (cut(data[n], case.variant, p, rank) for n in ("q", "k", "v", "grad"))
    extra = {} if group is None else {"group": group}
    if case.variant in ("ring", "zigzag"):
        layout = "zigzag" if case.variant == "zigzag" else "contiguous"
        return Step(
            "ring_step",
            (q, k, v, grad, case.causal),
            {"layout": layout, **extra},
            measure=RING_PROBES if probes else (),
        )
    return Step("cp_step", (case.variant, q, k, v, grad, case.causal), extra)


RUNS: dict[tuple, dict] = {}


def run_cases(submission, p: int) -> dict:
    """Every case of CASES on a world of p ranks, one call (a script of steps), plus the zigzag
    shard and unshard of a tensor: per case id, per rank, (result, measurements)."""
    key = (id(submission), p)
    if key not in RUNS:
        data = {h: make_data(p, h) for h in HEADS}
        # 2p chunks of 3 positions: a shard of 6, which cutting in 3 parts instead of 2 tells apart
        x = torch.randn(3, 2, 6 * p, 5, generator=generator("cp-zigzag", p), dtype=torch.float64)
        steps = []
        for r in range(p):
            mine = [step_for(c, data[c.heads], p, r) for c in CASES]
            mine += [Step("zigzag_shard", (x,), {"dim": 2}), Step("zigzag_unshard", (zigzag(x, p, r),), {"dim": 2})]
            steps.append(mine)
        result = submission.script_spmd(p, steps)
        RUNS[key] = {"result": result, "data": data, "x": x}
    return RUNS[key]


def case_outputs(run: dict, case: Case) -> tuple[list[dict], list[dict]]:
    """Each rank's result and measurements of one case of run_cases."""
    i = CASES.index(case)
    result = run["result"]
    return [steps[i] for steps in result.steps], [m[i] for m in result.measurements]


def cp_comm_bytes(variant: str, s: int, b: int, h_q: int, h_kv: int, d: int, p: int, element_bytes: int):
    """(forward, backward) bytes each rank sends, from the algorithms (the docstring's figures)."""
    kv = b * h_kv * (s // p) * d * element_bytes
    q = b * h_q * (s // p) * d * element_bytes
    if variant in ("ring", "zigzag"):
        return 2 * (p - 1) * kv, 4 * (p - 1) * kv
    if variant == "ulysses":
        each = (p - 1) * (2 * q + 2 * kv) // p
        return each, each
    if variant == "allgather_kv":
        return 2 * (p - 1) * kv, 2 * (p - 1) * kv
    raise ValueError(variant)


def ring_overlap_condition(b, h_q, h_kv, d, element_bytes, flops_per_second, alpha, beta) -> float:
    a = 4 * b * h_q * d / flops_per_second
    c = beta * 2 * b * h_kv * d * element_bytes
    return (c + math.sqrt(c * c + 4 * a * alpha)) / (2 * a)


def library_collectives(variant: str, p: int, heads: str, backward: bool, group=None) -> None:
    """The collectives of one Ulysses or all-gathered-K/V layer, run by torch.distributed in a
    trusted world (float64, the suite's sizes), for the byte baseline."""
    h_q, h_kv = HEADS[heads]
    q_numel, kv_numel = BATCH * h_q * S_LOCAL * HEAD_DIM, BATCH * h_kv * S_LOCAL * HEAD_DIM
    size = dist.get_world_size(group)

    def all_to_all(n: int) -> None:
        x = torch.zeros(n, dtype=torch.float64)
        dist.all_to_all_single(torch.empty_like(x), x, group=group)

    if variant == "ulysses":
        for n in (q_numel, kv_numel, kv_numel, q_numel) * (2 if backward else 1):
            all_to_all(n)
        return
    for _ in range(2):
        x = torch.zeros(kv_numel, dtype=torch.float64)
        dist.all_gather_single(torch.empty(size * kv_numel, dtype=torch.float64), x, group=group)
    if backward:
        for _ in range(2):
            x = torch.zeros(size * kv_numel, dtype=torch.float64)
            dist.reduce_scatter_single(torch.empty(kv_numel, dtype=torch.float64), x, group=group)
