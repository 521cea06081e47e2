# Your working copy: replace every `raise NotImplementedError` with your implementation.
# (Generated from the course's reference by `python -m grader sync`.)
"""Ring attention and the zigzag layout (lecture 11-context-parallelism, sections 3 and 4).

Context parallelism splits the SEQUENCE of every activation over the p ranks of a group: each rank
holds s/p positions of q, k and v, never the whole sequence. Attention is the one layer where a
position needs every other position; ring attention (Liu et al. 2023) gets it without gathering
K and V: the K/V blocks travel around the ring of the group, one hop per step, and each rank
merges the attention of its queries over each block it sees with the log-sum-exp of the online
softmax (lecture 03). After p steps every query has seen every key.

Layout (every function of this module):

    q        (b, h_q, s_local, d)     this rank's positions, heads second, as SDPA takes them
    k, v     (b, h_kv, s_local, d)    the same positions; h_q a multiple of h_kv (GQA:
                                      query head i reads kv head i // (h_q // h_kv))

The softmax scale is 1/sqrt(d). Every function takes `group` (None: the default group, the
whole world) and works among its ranks only: p is dist.get_world_size(group) and "rank i" is
dist.get_rank(group). Point-to-point calls take GLOBAL ranks (dist.get_global_rank(group, i)).

layout="contiguous": group rank i holds positions [i*s_local, (i+1)*s_local) of the sequence.
layout="zigzag": the sequence is cut into 2p chunks of c = s_local/2 positions and rank i holds
chunks i and 2p-1-i, in that order (what zigzag_shard returns). Under a causal mask the early
chunks see few keys and the late ones many; pairing chunk i with chunk 2p-1-i gives every rank
the same amount of work.
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist


def attention_block(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    q_positions: torch.Tensor | None = None,
    k_positions: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Given: attention of the queries q (b, h_q, n_q, d) over ONE block of keys and values
    k, v (b, h_kv, n_k, d), with plain matmuls (GQA by a view, no copy of k or v per query head).

    Returns (out, lse): out (b, h_q, n_q, d) is softmax(q k^T / sqrt(d)) v over this block only,
    lse (b, h_q, n_q) the log of each row's sum of exponentials (the log-sum-exp, -inf for a row
    that sees no key). With q_positions (n_q,) and k_positions (n_k,), the global positions of
    the rows and columns, key j is hidden from query i when k_positions[j] > q_positions[i] (a
    causal mask); without them nothing is hidden. The scores of the block, (b, h_q, n_q, n_k),
    are the largest tensor it makes. Differentiable by autograd."""
    b, h_q, n_q, d = q.shape
    h_kv = k.shape[1]
    g = h_q // h_kv
    scores = q.reshape(b, h_kv, g, n_q, d) @ k.unsqueeze(2).transpose(-1, -2) / math.sqrt(d)
    if q_positions is not None and k_positions is not None:
        hidden = k_positions.view(1, -1) > q_positions.view(-1, 1)
        scores = scores.masked_fill(hidden, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    weights = torch.exp(scores - lse.masked_fill(torch.isinf(lse), 0.0).unsqueeze(-1))
    out = weights @ v.unsqueeze(2)
    return out.reshape(b, h_q, n_q, d), lse.reshape(b, h_q, n_q)


def _global_rank(group: dist.ProcessGroup | None, group_rank: int) -> int:
    return group_rank if group is None else dist.get_global_rank(group, group_rank)


def check_qkv(function: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    """Given: raise ValueError, naming the argument, unless q is (b, h_q, s, d) and k and v are
    both (b, h_kv, s, d) with h_q a multiple of h_kv. Shapes are the same on every rank, so every
    rank raises (none is left waiting for a message)."""
    if q.dim() != 4:
        raise ValueError(f"{function}: q must be (b, h_q, s_local, d), got shape {tuple(q.shape)}")
    if k.dim() != 4 or k.shape[0] != q.shape[0] or k.shape[2:] != q.shape[2:]:
        raise ValueError(
            f"{function}: k of shape {tuple(k.shape)} does not fit q of shape {tuple(q.shape)}; k must be "
            f"(b, h_kv, s_local, d) with q's b, s_local and d"
        )
    if v.shape != k.shape:
        raise ValueError(f"{function}: v of shape {tuple(v.shape)} must have k's shape {tuple(k.shape)}")
    if q.shape[1] % k.shape[1]:
        raise ValueError(
            f"{function}: q's {q.shape[1]} heads are not a multiple of k's {k.shape[1]} kv heads "
            f"(GQA needs h_q % h_kv == 0)"
        )


def zigzag_shard(x: torch.Tensor, group: dist.ProcessGroup | None = None, dim: int = 2) -> torch.Tensor:
    """This rank's zigzag shard of x, the WHOLE sequence (the same on every rank of `group`): cut
    dimension `dim` (the sequence; 2 in the (b, h, s, d) layout) into 2p equal chunks and return
    chunks i and 2p-1-i concatenated in that order, i = dist.get_rank(group), p the size of
    `group` (a new tensor; no communication). Raises ValueError when x.shape[dim] is not a
    multiple of 2p."""
    raise NotImplementedError("implement zigzag_shard (lectures/11-context-parallelism.md, section 4)")


def zigzag_unshard(x: torch.Tensor, group: dist.ProcessGroup | None = None, dim: int = 2) -> torch.Tensor:
    """The inverse of zigzag_shard: every rank of `group` passes its zigzag shard x (chunks i and
    2p-1-i along `dim`); every rank returns the whole sequence in order, with one all-gather of the
    shards (dist.all_gather_single) and a reordering. dist.all_gather_single concatenates the
    shards along their first dimension: for inputs of shape (n, ...) its output has shape
    (p * n, ...), never (p, n, ...) (gloo refuses a stacked output), so move `dim` to the front
    first. Raises ValueError when x.shape[dim] is odd (a zigzag shard holds two equal chunks)."""
    raise NotImplementedError("implement zigzag_unshard (lectures/11-context-parallelism.md, section 4)")


def ring_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool = False,
    group: dist.ProcessGroup | None = None,
    layout: str = "contiguous",
) -> torch.Tensor:
    """Attention of this rank's queries over the whole sequence, whose K and V are spread over the
    ranks of `group`, by ring attention: returns this rank's rows of
    softmax(Q K^T / sqrt(d) [+ causal mask]) V, shape (b, h_q, s_local, d), equal to
    F.scaled_dot_product_attention on the whole sequence (enable_gqa, is_causal=causal) cut the
    same way. q (b, h_q, s_local, d), k and v (b, h_kv, s_local, d), the same shapes on every rank.

    Forward: p steps. At each step a rank holds one K/V block; before computing on it, it posts the
    non-blocking send of that block to the next rank of the ring and the receive of the next block
    from the previous one (dist.isend / dist.irecv, or dist.batch_isend_irecv), so the transfer runs
    while it computes; it waits only when it needs the next block. Partial outputs merge by the
    log-sum-exp of the online softmax (never by adding softmaxes). Each rank sends p-1 K/V blocks
    and no rank ever holds the whole K or V. The output has q's dtype (float64, float32, bfloat16
    or float16) and stays finite for logits of any size: the merge exponentiates only differences
    such as lse_a - lse (it subtracts the maximum, as the online softmax does), never an lse itself.

    Backward (an autograd Function): the K/V blocks travel the ring again, as in forward, and
    each block's gradients dK and dV follow it one hop behind. The block's owner keeps its own
    queries' share at home. The first rank the block reaches starts the block's running dK/dV
    with its share and sends it to the right; each later rank receives it from the left, adds
    its share and sends it on; the last send (the (p-1)-th) reaches the owner, which adds it to
    its share. Every rank ends with q.grad, k.grad and v.grad of its own shard, and sends p-1 K/V
    blocks and p-1 dK/dV blocks (cp_comm_bytes' backward): a gradient that sets out with its
    block from the owner would make p hops.

    causal: query position i sees key positions j <= i. Blocks the mask hides completely are
    skipped (no FLOPs), and a block that is half hidden is computed only where it is visible.
    layout: "contiguous" or "zigzag" (the module docstring); with "zigzag" under causal, every
    rank does the same attention FLOPs. Raises ValueError when layout is neither, when the
    shapes do not fit (see check_qkv), or with "zigzag" when s_local is odd."""
    raise NotImplementedError("implement ring_attention (lectures/11-context-parallelism.md, section 3)")


def ring_step(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    grad_output: torch.Tensor | None = None,
    causal: bool = False,
    group: dist.ProcessGroup | None = None,
    layout: str = "contiguous",
) -> dict[str, torch.Tensor]:
    """Given (the grader and the notebook call it on every rank of `group`): ring_attention on
    this rank's shards, then, when grad_output is given, backward from it. Returns "output" and,
    after a backward, "grad_q", "grad_k" and "grad_v" (this rank's shards)."""
    q, k, v = (x.detach().clone().requires_grad_(grad_output is not None) for x in (q, k, v))
    out = ring_attention(q, k, v, causal=causal, group=group, layout=layout)
    result = {"output": out.detach()}
    if grad_output is not None:
        out.backward(grad_output)
        result.update(grad_q=q.grad, grad_k=k.grad, grad_v=v.grad)
    return result


# (Write any helper functions you need here.)
