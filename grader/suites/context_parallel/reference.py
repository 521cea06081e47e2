"""Trusted references of the context_parallel suite: attention on the whole sequence by torch's
SDPA in float64 (never imported from a submission), how the ranks' shards are cut, the bytes
each variant sends (derived from the algorithms; lecture 11, section 7), the library's own
collectives of Ulysses and all-gathered K/V for the byte baselines, the kinds of collective each
docstring names, and the runs that several tests read (one call per world: the equality checks'
per world size, the configuration sweep's world of 4)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F

from grader.sandbox import Group, Step
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


def make_data(
    p: int, heads: str | tuple[int, int], *salt: object, s_local: int = S_LOCAL, batch: int = BATCH, d: int = HEAD_DIM
) -> dict[str, torch.Tensor]:
    """Whole-sequence q, k, v and the output's gradient, float64, s = s_local * p; heads a key of
    HEADS or (h_q, h_kv)."""
    h_q, h_kv = HEADS[heads] if isinstance(heads, str) else heads
    gen = generator("cp-data", p, heads, s_local, batch, d, *salt)
    s = s_local * p
    q = torch.randn(batch, h_q, s, d, generator=gen, dtype=torch.float64)
    k = torch.randn(batch, h_kv, s, d, generator=gen, dtype=torch.float64)
    v = torch.randn(batch, h_kv, s, d, generator=gen, dtype=torch.float64)
    grad = torch.randn(batch, h_q, s, d, generator=gen, dtype=torch.float64)
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


def library_collectives(variant: str, p: int, heads: str, backward: bool, s_local: int = S_LOCAL, group=None) -> None:
    """The collectives of one Ulysses or all-gathered-K/V layer, run by torch.distributed in a
    trusted world (float64, the suite's batch, heads and d; s_local positions per rank), for the
    byte baseline."""
    h_q, h_kv = HEADS[heads]
    q_numel, kv_numel = BATCH * h_q * s_local * HEAD_DIM, BATCH * h_kv * s_local * HEAD_DIM
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


# ---- the kinds of collective each docstring names (probe "groups": every ProcessGroup call) ----

POINT_TO_POINT = frozenset({"send", "recv", "recv_anysource"})
GATHERS = frozenset(
    {"allgather", "_allgather_base", "allgather_coalesced", "allgather_into_tensor_coalesced", "all_gather_single",
     "all_gather_single_coalesced"}
)  # fmt: skip
REDUCE_SCATTERS = frozenset(
    {"reduce_scatter", "_reduce_scatter_base", "reduce_scatter_tensor_coalesced", "reduce_scatter_single",
     "reduce_scatter_single_coalesced"}
)  # fmt: skip
ALL_TO_ALLS = frozenset({"alltoall", "alltoall_base", "all_to_all_single"})
# variant -> (kinds its forward may call, kinds its backward may call, what the docstring names).
# All-gathered K/V's backward is a reduce-scatter; an all-to-all followed by a local sum is the
# same reduce-scatter (what torch.distributed.nn.functional.all_gather's backward does on gloo),
# an all-reduce of the whole gradient is not: on NCCL it sends twice the bytes, on gloo the same.
NAMED_KINDS = {
    "ring": (POINT_TO_POINT, POINT_TO_POINT, "point-to-point sends and receives (dist.isend / dist.irecv)"),
    "zigzag": (POINT_TO_POINT, POINT_TO_POINT, "point-to-point sends and receives (dist.isend / dist.irecv)"),
    "ulysses": (ALL_TO_ALLS, ALL_TO_ALLS, "all-to-alls (dist.all_to_all_single), forward and backward"),
    "allgather_kv": (
        GATHERS,
        REDUCE_SCATTERS | ALL_TO_ALLS,
        "all-gathers of K and V in forward (dist.all_gather_single) and reduce-scatters of their gradients in "
        "backward (dist.reduce_scatter_single)",
    ),
}
DIST_NAME = {  # the torch.distributed call behind a ProcessGroup method, for the messages
    "allreduce": "dist.all_reduce",
    "allreduce_coalesced": "dist.all_reduce_coalesced",
    "allgather": "dist.all_gather",
    "all_gather_single": "dist.all_gather_single",
    "reduce_scatter": "dist.reduce_scatter",
    "reduce_scatter_single": "dist.reduce_scatter_single",
    "alltoall": "dist.all_to_all",
    "all_to_all_single": "dist.all_to_all_single",
    "broadcast": "dist.broadcast",
    "reduce": "dist.reduce",
    "gather": "dist.gather",
    "scatter": "dist.scatter",
    "send": "a send",
    "recv": "a receive",
}


def call_name(op: str) -> str:
    return DIST_NAME.get(op, f"ProcessGroup.{op}")


# ---- the configuration sweep: a world of 4 whose cp groups are not the world ----
#
# Ranks (0, 1, 3) form a cp group of 3 (a p that is not a power of two; global ranks that are not
# its group ranks 0, 1, 2, and not consecutive) while rank 2 is a group of its own (p = 1 inside a
# world of 4: the group's size, not the world's), at the same time, with other data. No size is a
# power of two: b = 3, GQA 9 query heads over 3 kv heads (3 per kv head; Ulysses gives each of
# the 3 ranks 3 query heads and 1 kv head), d = 6, s_local = 5 (odd: only the zigzag layout needs
# an even one) and 6 for zigzag (chunks of 3), so s = 15 and 18; the zigzag helpers cut dimension
# 1 of a (2, 6p, 6) tensor, not the default 2 (which splits into 2p chunks as well: cutting it
# instead gives a wrong shard, not an error).
SWEEP_WORLD = 4
SWEEP_GROUPS = ((0, 1, 3), (2,))
SWEEP_BATCH, SWEEP_HEADS, SWEEP_D = 3, (9, 3), 6
SWEEP_S_LOCAL = {"ring": 5, "zigzag": 6, "ulysses": 5, "allgather_kv": 5}
SWEEP_CASES = [Case(v, "gqa9/3", c) for v in VARIANTS for c in (False, True)]
SWEEP_RUNS: dict[int, dict] = {}


def sweep_group(rank: int) -> tuple[int, ...]:
    return next(g for g in SWEEP_GROUPS if rank in g)


def sweep_data(group: tuple[int, ...], variant: str) -> dict[str, torch.Tensor]:
    return make_data(
        len(group), SWEEP_HEADS, "sweep", group, s_local=SWEEP_S_LOCAL[variant], batch=SWEEP_BATCH, d=SWEEP_D
    )


def run_sweep(submission) -> dict:
    """One call on SWEEP_WORLD ranks, every rank in its SWEEP_GROUPS instance: per case of
    SWEEP_CASES the layer (forward and backward, under the "groups" probe) and, for Ulysses and
    all-gathered K/V, its forward alone before it (so that the calls of the backward are told
    apart); then zigzag_shard and zigzag_unshard along dimension 1. Returns the result, the data
    and, per entry ("layer" or "forward", case) or "shard" / "unshard", its index in each rank's
    steps."""
    key = id(submission)
    if key not in SWEEP_RUNS:
        data = {g: {v: sweep_data(g, v) for v in VARIANTS} for g in SWEEP_GROUPS}
        x = {
            g: torch.randn(2, 6 * len(g), 6, generator=generator("cp-sweep-zigzag", g), dtype=torch.float64)
            for g in SWEEP_GROUPS
        }
        index: dict = {}
        steps = []
        for r in range(SWEEP_WORLD):
            group = sweep_group(r)
            p, g, handle = len(group), group.index(r), Group(group)
            mine = []
            for case in SWEEP_CASES:
                q, k, v, grad = (cut(data[group][case.variant][n], case.variant, p, g) for n in ("q", "k", "v", "grad"))
                if case.variant in ("ring", "zigzag"):
                    layout = "zigzag" if case.variant == "zigzag" else "contiguous"
                    kwargs = {"group": handle, "layout": layout}
                    entries = [("layer", Step("ring_step", (q, k, v, grad, case.causal), kwargs, measure=("groups",)))]
                else:
                    entries = [
                        (
                            "forward",
                            Step(
                                "cp_step",
                                (case.variant, q, k, v, None, case.causal),
                                {"group": handle},
                                measure=("groups",),
                            ),
                        ),
                        (
                            "layer",
                            Step(
                                "cp_step",
                                (case.variant, q, k, v, grad, case.causal),
                                {"group": handle},
                                measure=("groups",),
                            ),
                        ),
                    ]
                for name, step in entries:
                    index[(name, case)] = len(mine)
                    mine.append(step)
            index["shard"], index["unshard"] = len(mine), len(mine) + 1
            mine += [
                Step("zigzag_shard", (x[group],), {"group": handle, "dim": 1}),
                Step("zigzag_unshard", (zigzag(x[group], p, g, dim=1),), {"group": handle, "dim": 1}),
            ]
            steps.append(mine)
        result = submission.script_spmd(SWEEP_WORLD, steps)
        SWEEP_RUNS[key] = {"result": result, "data": data, "x": x, "index": index}
    return SWEEP_RUNS[key]
