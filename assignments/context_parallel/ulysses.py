# Your working copy: replace every `raise NotImplementedError` with your implementation.
# (Generated from the course's reference by `python -m grader sync`.)
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
    raise NotImplementedError("implement ulysses_attention (lectures/11-context-parallelism.md, section 5)")


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
    raise NotImplementedError("implement allgather_kv_attention (lectures/11-context-parallelism.md, section 6)")


# (Write any helper functions you need here.)

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
