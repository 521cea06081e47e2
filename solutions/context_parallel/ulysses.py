"""DeepSpeed-Ulysses and all-gathered K/V: the two other ways to run attention on a sequence
split over ranks (lecture 11-context-parallelism, sections 5 and 6).

The layout is ring.py's: q (b, h_q, s_local, d), k and v (b, h_kv, s_local, d), group rank i
holding positions [i*s_local, (i+1)*s_local) of the sequence (contiguous shards), the same
shapes on every rank, scale 1/sqrt(d), GQA query head i reading kv head i // (h_q // h_kv).
Every function takes `group` (None: the world) and communicates only within it.

Ulysses (Jacobs et al. 2023) trades the sequence split for a head split: one all-to-all gives
each rank ALL positions of h/p heads, attention runs locally on them, and a second all-to-all
gives the output back its sequence split. All-gathered K/V (Llama 3's context parallelism)
gathers K and V, which are small under GQA, and keeps the queries split.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from ring import attention_block, check_qkv, ring_step


def ulysses_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False, group: dist.ProcessGroup | None = None
) -> torch.Tensor:
    """This rank's rows (b, h_q, s_local, d) of attention over the whole sequence, by
    DeepSpeed-Ulysses: an all-to-all (dist.all_to_all_single) turns each of q, k and v from
    sequence-sharded (b, h, s_local, d) into head-sharded (b, h/p, s, d), group rank j receiving
    heads [j*h/p, (j+1)*h/p) of every position; attention runs locally on those heads (the given
    attention_block; causal: query position i sees keys j <= i); a second all-to-all turns the
    output (b, h_q/p, s, d) back into (b, h_q, s_local, d). Differentiable: backward runs the
    inverse all-to-alls. Equal to F.scaled_dot_product_attention on the whole sequence
    (enable_gqa, is_causal=causal), cut the same way. Raises ValueError, naming the argument,
    when h_q (q's heads) or h_kv (k's heads) is not a multiple of p, the size of `group`, or when
    the shapes do not fit (check_qkv)."""
    ### BEGIN SOLUTION
    check_qkv("ulysses_attention", q, k, v)
    p = dist.get_world_size(group)
    for name, heads in (("q", q.shape[1]), ("k", k.shape[1])):
        if heads % p:
            raise ValueError(
                f"ulysses_attention: {name} has {heads} heads, not a multiple of the {p} ranks of the group; "
                f"Ulysses gives each rank heads/p whole heads"
            )
    q, k, v = (_SequenceToHeads.apply(x, group) for x in (q, k, v))
    positions = torch.arange(q.shape[2], device=q.device) if causal else None
    out, _ = attention_block(q, k, v, positions, positions)
    return _HeadsToSequence.apply(out, group)
    ### END SOLUTION


def allgather_kv_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False, group: dist.ProcessGroup | None = None
) -> torch.Tensor:
    """This rank's rows (b, h_q, s_local, d) of attention over the whole sequence, by all-gathering
    K and V (dist.all_gather_single, each (b, h_kv, s, d) after it, the shards in group-rank
    order; all_gather_single concatenates along the first dimension, as in zigzag_unshard, so
    gather with the sequence dimension first) and attending this rank's queries to them locally (the
    given attention_block), with the causal offset of this rank's positions: query position
    rank*s_local + i sees keys j <= rank*s_local + i. Differentiable: backward reduce-scatters the
    gradients of the gathered K and V (dist.reduce_scatter_single), so each rank ends with k.grad and
    v.grad of its own shard; never an all-reduce of the whole gradient (twice the bytes on NCCL, the
    same on gloo: the grader checks the kind of each collective). Equal to F.scaled_dot_product_attention
    on the whole sequence cut the same way. Raises ValueError when the shapes do not fit (check_qkv)."""
    ### BEGIN SOLUTION
    check_qkv("allgather_kv_attention", q, k, v)
    rank, s_local = dist.get_rank(group), q.shape[2]
    k, v = (_GatherSequence.apply(x, group) for x in (k, v))
    if causal:
        q_positions = torch.arange(rank * s_local, (rank + 1) * s_local, device=q.device)
        out, _ = attention_block(q, k, v, q_positions, torch.arange(k.shape[2], device=q.device))
    else:
        out, _ = attention_block(q, k, v)
    return out
    ### END SOLUTION


### BEGIN SOLUTION
def _all_to_all(x: torch.Tensor, group) -> torch.Tensor:
    """Chunk j of dimension 0 goes to group rank j; chunk j of the result came from rank j."""
    x = x.contiguous()
    out = torch.empty_like(x)
    dist.all_to_all_single(out, x, group=group)
    return out


def _sequence_to_heads(x: torch.Tensor, group) -> torch.Tensor:
    """(b, h, s_local, d) on every rank -> (b, h/p, p*s_local, d): rank j's heads, every position."""
    p = dist.get_world_size(group)
    b, h, s_local, d = x.shape
    chunks = x.reshape(b, p, h // p, s_local, d).transpose(0, 1)  # (p, b, h/p, s_local, d)
    received = _all_to_all(chunks, group)  # received[r] = rank r's positions of my heads
    return received.permute(1, 2, 0, 3, 4).reshape(b, h // p, p * s_local, d)


def _heads_to_sequence(x: torch.Tensor, group) -> torch.Tensor:
    """(b, h/p, s, d) -> (b, h, s/p, d): the inverse of _sequence_to_heads."""
    p = dist.get_world_size(group)
    b, h_local, s, d = x.shape
    chunks = x.reshape(b, h_local, p, s // p, d).permute(2, 0, 1, 3, 4)  # (p, b, h/p, s_local, d)
    received = _all_to_all(chunks, group)  # received[r] = heads of rank r at my positions
    return received.transpose(0, 1).reshape(b, p * h_local, s // p, d)


class _SequenceToHeads(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return _sequence_to_heads(x, group)

    @staticmethod
    def backward(ctx, grad):
        return _heads_to_sequence(grad, ctx.group), None


class _HeadsToSequence(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return _heads_to_sequence(x, group)

    @staticmethod
    def backward(ctx, grad):
        return _sequence_to_heads(grad, ctx.group), None


class _GatherSequence(torch.autograd.Function):
    """(b, h, s_local, d) -> (b, h, p*s_local, d) in group-rank order; backward reduce-scatters."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        p = dist.get_world_size(group)
        local = x.transpose(0, 2).contiguous()  # (s_local, h, b, d): the sequence first
        out = local.new_empty((p * local.shape[0], *local.shape[1:]))
        dist.all_gather_single(out, local, group=group)
        return out.transpose(0, 2)

    @staticmethod
    def backward(ctx, grad):
        p = dist.get_world_size(ctx.group)
        whole = grad.transpose(0, 2).contiguous()
        out = whole.new_empty((whole.shape[0] // p, *whole.shape[1:]))
        dist.reduce_scatter_single(out, whole, group=ctx.group)
        return out.transpose(0, 2), None


### END SOLUTION

VARIANTS = ("ring", "zigzag", "ulysses", "allgather_kv")


def cp_step(
    variant: str,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    grad_output: torch.Tensor | None = None,
    causal: bool = False,
    group: dist.ProcessGroup | None = None,
) -> dict[str, torch.Tensor]:
    """Given (the grader and the notebook call it on every rank of `group`): the attention of one
    variant, "ring" (ring_step: ring_attention, contiguous), "zigzag" (ring_step with
    layout="zigzag": q, k and v are zigzag shards), "ulysses" or "allgather_kv", on this rank's
    shards; then, when
    grad_output is given, backward from it. Returns "output" and, after a backward, "grad_q",
    "grad_k" and "grad_v" (this rank's shards)."""
    if variant in ("ring", "zigzag"):
        layout = "zigzag" if variant == "zigzag" else "contiguous"
        return ring_step(q, k, v, grad_output, causal, group, layout)
    q, k, v = (x.detach().clone().requires_grad_(grad_output is not None) for x in (q, k, v))
    if variant == "ulysses":
        out = ulysses_attention(q, k, v, causal=causal, group=group)
    elif variant == "allgather_kv":
        out = allgather_kv_attention(q, k, v, causal=causal, group=group)
    else:
        raise ValueError(f"cp_step: variant must be one of {VARIANTS}, got {variant!r}")
    result = {"output": out.detach()}
    if grad_output is not None:
        out.backward(grad_output)
        result.update(grad_q=q.grad, grad_k=k.grad, grad_v=v.grad)
    return result
