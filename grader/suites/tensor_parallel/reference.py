"""Trusted references of the tensor_parallel suite: the block on one process (written here, never
imported from a submission, attention by torch's SDPA), and how the ranks' shards fit together."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from grader.testing import generator


class Attention(nn.Module):
    """Causal GQA self-attention on (s, b, hidden) with four nn.Linear layers; SDPA computes it."""

    def __init__(self, hidden: int, heads: int, kv_heads: int) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.d = heads, kv_heads, hidden // heads
        self.wq = nn.Linear(hidden, heads * self.d)
        self.wk, self.wv = (nn.Linear(hidden, kv_heads * self.d) for _ in range(2))
        self.proj = nn.Linear(heads * self.d, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s, b, _ = x.shape
        q = self.wq(x).view(s, b, self.heads, self.d).permute(1, 2, 0, 3)
        k, v = (w(x).view(s, b, self.kv_heads, self.d).permute(1, 2, 0, 3) for w in (self.wk, self.wv))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        return self.proj(y.permute(2, 0, 1, 3).reshape(s, b, -1))


class Block(nn.Module):
    """The ParallelBlock's math on one process: pre-norm, attention then a gelu MLP."""

    def __init__(self, hidden: int, heads: int, kv_heads: int, ffn_hidden: int) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
        self.attention = Attention(hidden, heads, kv_heads)
        self.mlp = nn.Sequential()
        self.mlp.fc1 = nn.Linear(hidden, ffn_hidden)
        self.mlp.gelu = nn.GELU()
        self.mlp.fc2 = nn.Linear(ffn_hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.ln1(x))
        return x + self.mlp(self.ln2(x))


def make_state(hidden: int, heads: int, kv_heads: int, ffn_hidden: int, *salt: object) -> dict[str, torch.Tensor]:
    """A random float64 state of Block (LayerNorm weights and biases random too, not 1 and 0)."""
    gen = generator("tp-state", hidden, heads, kv_heads, ffn_hidden, *salt)
    shapes = {k: v.shape for k, v in Block(hidden, heads, kv_heads, ffn_hidden).state_dict().items()}
    state = {k: torch.randn(shape, generator=gen, dtype=torch.float64) / hidden**0.5 for k, shape in shapes.items()}
    for name in ("ln1", "ln2"):
        state[f"{name}.weight"] = 1 + 0.3 * torch.randn(hidden, generator=gen, dtype=torch.float64)
    return state


def block_reference(
    hidden: int, heads: int, kv_heads: int, ffn_hidden: int, state: dict, x: torch.Tensor, grad_output: torch.Tensor
) -> dict[str, object]:
    """Output, input gradient and every parameter's gradient (by state-dict name) on one process."""
    block = Block(hidden, heads, kv_heads, ffn_hidden).double()
    block.load_state_dict(state)
    x = x.clone().requires_grad_(True)
    out = block(x)
    out.backward(grad_output)
    return {"output": out.detach(), "grad_input": x.grad, "grads": {n: p.grad for n, p in block.named_parameters()}}


def assemble_grads(ranks: list[dict[str, torch.Tensor]], heads: int, kv_heads: int, sequence_parallel: bool) -> dict:
    """The full gradient of every Block parameter (state-dict names), from each rank's gradients
    by the ParallelBlock's parameter names, with the layouts of its docstrings: column layers by
    rows (qkv fused per rank as [wq_r; wk_r; wv_r]), row layers' weights by columns; whole
    parameters from rank 0, or summed over ranks with sequence parallelism. A missing name or a
    gradient of None is reported as the name alone (a KeyError)."""
    p = len(ranks)

    def part(name: str) -> list[torch.Tensor]:
        grads = [r.get(name) for r in ranks]
        if any(g is None for g in grads):
            raise KeyError(name)
        return grads

    full: dict[str, torch.Tensor] = {}
    for kind in ("weight", "bias"):
        qkv = part(f"attention.qkv.{kind}")
        rows = qkv[0].shape[0]  # (heads + 2 kv_heads) / p heads of d rows
        local_q, local_kv = rows * heads // (heads + 2 * kv_heads), rows * kv_heads // (heads + 2 * kv_heads)
        split = [g.split([local_q, local_kv, local_kv]) for g in qkv]
        for i, name in enumerate(("wq", "wk", "wv")):
            full[f"attention.{name}.{kind}"] = torch.cat([s[i] for s in split])
        full[f"mlp.fc1.{kind}"] = torch.cat(part(f"mlp.fc1.{kind}"))
    full["attention.proj.weight"] = torch.cat(part("attention.proj.weight"), dim=1)
    full["mlp.fc2.weight"] = torch.cat(part("mlp.fc2.weight"), dim=1)
    for name in ("ln1.weight", "ln1.bias", "ln2.weight", "ln2.bias", "attention.proj.bias", "mlp.fc2.bias"):
        grads = part(name)
        full[name] = torch.stack(grads).sum(0) if sequence_parallel and p > 1 else grads[0]
    return full


def chunk(x: torch.Tensor, world_size: int, rank: int) -> torch.Tensor:
    """Rank r's chunk of dimension 0 (the sequence), contiguous."""
    return x.chunk(world_size)[rank].contiguous()


def library_collectives(plan: list[str], numel: int, group=None) -> None:
    """Run, in a trusted world, the collectives a layer should need, on float64 tensors of
    `numel` elements (the whole tensor reduced or gathered) within `group` (None: the world):
    "all_reduce", "all_gather" (dist.all_gather_single) or "reduce_scatter"
    (dist.reduce_scatter_single). The bytes each rank sends, counted by the kernel, are the bound
    a submission is held to."""
    import torch.distributed as dist

    p = dist.get_world_size(group)
    whole = torch.randn(numel, dtype=torch.float64)
    for kind in plan:
        if kind == "all_reduce":
            dist.all_reduce(whole.clone(), group=group)
        elif kind == "all_gather":
            dist.all_gather_single(torch.empty_like(whole), whole[: numel // p].clone(), group=group)
        else:
            dist.reduce_scatter_single(whole.new_empty(numel // p), whole.clone(), group=group)


def counted(calls: list) -> dict[tuple[str, int], int]:
    """How many collectives of each (kind, elements) a CollectiveCounter list holds."""
    counts: dict[tuple[str, int], int] = {}
    for kind, elements in calls:
        counts[(kind, int(elements))] = counts.get((kind, int(elements)), 0) + 1
    return counts


def describe_calls(calls: list) -> str:
    """A CollectiveCounter list for a student: '2 all_reduce of 512 elements, ...' or 'none'."""
    return ", ".join(f"{n} {kind} of {elements} elements" for (kind, elements), n in counted(calls).items()) or "none"


@dataclass(frozen=True)
class BlockCase:
    world_size: int
    heads: int
    kv_heads: int
    sequence_parallel: bool
    hidden: int = 32
    ffn_hidden: int = 64
    seq: int = 16
    batch: int = 2

    @property
    def id(self) -> str:
        attention = "mha" if self.heads == self.kv_heads else f"gqa{self.heads}x{self.kv_heads}"
        return f"world={self.world_size}-{'sp' if self.sequence_parallel else 'tp'}-{attention}"

    @property
    def sizes(self) -> tuple[int, int, int, int]:
        return self.hidden, self.heads, self.kv_heads, self.ffn_hidden


BLOCK_CASES = [
    BlockCase(2, 4, 4, False),
    BlockCase(2, 4, 2, False),
    BlockCase(2, 4, 4, True),
    BlockCase(2, 8, 2, True),
    BlockCase(4, 8, 4, False),
    BlockCase(4, 8, 4, True),
    # two key/value heads on each rank, each serving its own group of query heads: a head-to-group
    # mapping other than i // (heads / kv_heads) (e.g. i % kv_heads) reads another head's keys
    BlockCase(2, 8, 4, False),
    BlockCase(4, 16, 8, True),
]
RUNS: dict[tuple, tuple] = {}


def run_block(submission, case: BlockCase):
    """Every rank's block_step result and the one-process reference; one run per submission and
    case, shared by the equality and the performance checks."""
    key = (id(submission), case)
    if key not in RUNS:
        gen = generator("tp-block", case.id)
        state = make_state(*case.sizes, case.id)
        x = torch.randn(case.seq, case.batch, case.hidden, generator=gen, dtype=torch.float64)
        grad_output = torch.randn(case.seq, case.batch, case.hidden, generator=gen, dtype=torch.float64)
        p, sp = case.world_size, case.sequence_parallel
        args = [
            (*case.sizes, state, chunk(x, p, r) if sp else x, chunk(grad_output, p, r) if sp else grad_output, sp)
            for r in range(p)
        ]
        result = submission.function("block_step").spmd(p, args)
        RUNS[key] = result, block_reference(*case.sizes, state, x, grad_output)
    return RUNS[key]


def expected_collectives(case: BlockCase) -> dict[str, dict[tuple[str, int], int]]:
    """The collectives of one block, by direction, as Megatron-Core makes them. TP: the two g's
    all-reduce in forward, the two f's in backward. SP: forward all-gathers each column layer's
    input and reduce-scatters each row layer's output; backward all-gathers each row layer's
    output gradient, all-gathers each column layer's input again (it kept only its chunk: the
    weight gradient needs the whole) and reduce-scatters that layer's input gradient, as
    LinearWithGradAccumulationAndAsyncCommunication does with sequence_parallel. All of
    s*b*hidden elements."""
    whole = case.seq * case.batch * case.hidden
    if case.sequence_parallel:
        return {
            "forward": {("all_gather", whole): 2, ("reduce_scatter", whole): 2},
            "backward": {("all_gather", whole): 4, ("reduce_scatter", whole): 2},
        }
    return {"forward": {("all_reduce", whole): 2}, "backward": {("all_reduce", whole): 2}}


def collective_plan(case: BlockCase) -> list[str]:
    """The collectives of one block's forward and backward, as library_collectives runs them."""
    return [kind for counts in expected_collectives(case).values() for (kind, _), n in counts.items() for _ in range(n)]


def ring_bytes(case: BlockCase) -> int:
    """What an ideal ring sends per rank for the block's plan, in float64: (p-1)/p of the tensor
    per all-gather or reduce-scatter, twice that per all-reduce."""
    p, numel = case.world_size, case.seq * case.batch * case.hidden
    halves = sum(2 if kind == "all_reduce" else 1 for kind in collective_plan(case))
    return int(halves * (p - 1) / p * numel * 8)


def block_saved_elements(case: BlockCase) -> int:
    """The elements one rank of the ParallelBlock keeps for backward (every storage autograd
    saves in its forward, parameters excluded), for this case's sizes, float64 and no dropout,
    as the reference saves them on CPU. With d = h / a, f = ffn_hidden, g = kv_heads, p ranks:

        outside the regions  (4sbh + 4sb) / q       q = p with SP, 1 with TP
            ln1 and ln2: their inputs (2sbh) and their mean and rstd (4sb); the inputs of the
            QKV and fc1 matmuls (2sbh), of which SP keeps only this rank's s/p rows (the column
            layer gathers them again in backward)
        inside the regions   (sb(a + 2g)d + sbh + a*sb + 2sbf) / p
            the fused QKV output (q, k, v are views of it, given to SDPA with enable_gqa), the
            attention output (SDPA saves it; the projection's input is a view of it), SDPA's
            logsumexp (b, a/p, s) of its CPU flash kernel, the GeLU input and fc2's input.

    Korthikanti et al.'s table 2 (memory.tp_activation_bytes) counts the same regions in 16-bit
    with dropout and without flash attention: its 10sbh bytes outside the regions (LayerNorm,
    QKV and fc1 inputs at 2 bytes, two 1-byte dropout masks) are this 4sbh (+ 4sb statistics)
    without the masks, divided by t under SP as here; inside, a*s^2*b softmax terms become
    SDPA's a*s*b logsumexp."""
    s, b, h, a, g, f, p = case.seq, case.batch, case.hidden, case.heads, case.kv_heads, case.ffn_hidden, case.world_size
    d = h // a
    outside = 4 * s * b * h + 4 * s * b
    inside = s * b * (a + 2 * g) * d + s * b * h + a * s * b + 2 * s * b * f
    return (outside // p if case.sequence_parallel else outside) + inside // p
