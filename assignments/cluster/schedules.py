# Your working copy: replace every `raise NotImplementedError` with your implementation.
# (Generated from the course's reference by `python -m grader sync`.)
"""Collective algorithms as transfer schedules (lecture 13-the-cluster, sections 5 and 6).

A schedule is plain data (grader/models/cluster.py, read it: it also holds the simulator that
replays a schedule on a cluster's links and the executor that runs it on real ranks):

    {"op": "all_reduce" | "all_to_all", "gpus": [...], "nbytes": N, "chunks": C,
     "steps": [(repeat, [(src, dst, first, last, "reduce" | "copy"), ...]), ...]}

A transfer sends chunks first..last-1 of the buffer from GPU src to GPU dst; a step with
repeat k runs k times, each time after the first passing on the range each src received the time
before. Every transfer of a step reads the buffers as the step began.

Ring conventions (module collectives), for N bytes among p GPUs, bytes one GPU sends:
    all-reduce 2(p-1)/p * N      reduce-scatter and all-gather (p-1)/p * N
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from grader.models.cluster import Cluster, run_schedule


def _check_ranks(ranks: list[int]) -> list[int]:
    if not isinstance(ranks, (list, tuple)) or not ranks:
        raise ValueError(f"ranks must be a non-empty list of GPU ids, not {ranks!r}")
    if not all(isinstance(r, int) and not isinstance(r, bool) and r >= 0 for r in ranks):
        raise ValueError(f"ranks must be GPU ids (integers >= 0), not {ranks!r}")
    if len(set(ranks)) != len(ranks):
        raise ValueError(f"ranks {list(ranks)} name a GPU twice")
    return list(ranks)


def _check_nbytes(nbytes: int) -> None:
    if not isinstance(nbytes, int) or isinstance(nbytes, bool) or nbytes < 0:
        raise ValueError(f"nbytes must be an integer >= 0, not {nbytes!r}")


def _check_cluster(cluster: Cluster) -> None:
    if not isinstance(cluster, Cluster):
        raise ValueError(f"cluster must be a grader.models.cluster.Cluster, not {type(cluster).__name__}")


def flat_alltoall_schedule(ranks: list[int], nbytes: int) -> dict:
    """Given (an example of the format): all-to-all in one step, every GPU sending each other
    GPU its block directly: P - 1 messages per GPU, nbytes / P bytes each."""
    _check_nbytes(nbytes)
    gpus = _check_ranks(ranks)
    p = len(gpus)
    transfers = [(gpus[s], gpus[d], s * p + d, s * p + d + 1, "copy") for s in range(p) for d in range(p) if s != d]
    return {
        "op": "all_to_all",
        "gpus": gpus,
        "nbytes": nbytes,
        "chunks": p * p,
        "steps": [(1, transfers)] if transfers else [],
    }


def ring_allreduce_schedule(ranks: list[int], nbytes: int) -> dict:
    """Lecture 1's ring all-reduce of `nbytes` over the GPUs `ranks`, in that ring order (GPU
    ranks[i] sends to ranks[(i+1) % p]), as a schedule of p chunks (gpus = ranks, in order):

    - a reduce-scatter: one step repeated p - 1 times, each GPU sending one chunk ("reduce") to
      its successor, which passes on what it received;
    - an all-gather: one step repeated p - 1 times, each GPU sending the chunk it holds complete
      ("copy"), then passing on what it received.

    `ranks` may be any distinct GPU ids >= 0 in any order, not only 0..p-1: the GPUs of one
    rail across nodes ([3, 11, 19, 27] on nodes of 8), of a node other than node 0 ([8, ...,
    15]), an unordered list, and any count p (3, 5, 6, ...). A GPU's place in the ring is its
    position i in `ranks`, never its id; chunks are numbered 0..p-1 whatever the ids.
    Each GPU sends 2(p-1) chunks of N/p bytes. One GPU (p = 1): no steps.
    Raises ValueError for an empty list, a rank that is not an int >= 0, a GPU named twice, or
    nbytes that is not an int >= 0 (a float such as 64.0 is not an int, nor is a bool).
    """
    raise NotImplementedError("implement ring_allreduce_schedule (lectures/13-the-cluster.md, section 5)")


def hierarchical_allreduce_schedule(cluster: Cluster, nbytes: int) -> dict:
    """All-reduce of `nbytes` over every GPU of `cluster` (gpus = 0 .. G-1), in three phases;
    g = gpus_per_node, n = nodes, chunks = g * n, and chunk group j is chunks j*n .. j*n + n-1:

    1. reduce-scatter inside each node: a ring over the node's GPUs in local-rank order,
       passing chunk groups (n chunks at a time), repeated g - 1 times, so that each GPU ends
       with one chunk group summed over its node;
    2. all-reduce across nodes, between the GPUs of the same local rank (one per rail): a ring
       over the nodes in order, reduce-scatter then all-gather of the n chunks of the group the
       GPU holds, each repeated n - 1 times;
    3. all-gather inside each node: the ring of phase 1 passing complete chunk groups, repeated
       g - 1 times.

    Per GPU: 2(g-1)/g * N bytes over NVLink and 2(n-1)/n * N/g over the network: each NIC
    carries 1/g of a flat ring's share. A phase with nothing to do (g = 1 or n = 1) has no step.
    Raises ValueError for a cluster that is not a Cluster or nbytes that is not an int >= 0 (a
    float or a bool is refused, as in ring_allreduce_schedule).
    """
    raise NotImplementedError("implement hierarchical_allreduce_schedule (lectures/13-the-cluster.md, section 5)")


def double_binary_tree_allreduce_schedule(ranks: list[int], nbytes: int) -> dict:
    """NCCL's double binary tree all-reduce of `nbytes` over `ranks` (gpus = ranks), 2 chunks.

    Two binary trees, each carrying one half of the buffer: position i of a tree has parent
    (i - 1) // 2 and children 2i + 1, 2i + 2 (depth of position i: floor(log2(i + 1))). Tree 0
    puts ranks[i] at position i and carries chunk 0; tree 1 puts ranks[p - 1 - i] at position i
    and carries chunk 1, so that (for p even) the inner GPUs of one tree are the leaves of the
    other. With D = floor(log2 p), the schedule has 2D steps, both trees in each:

    - reduce, D steps: the step for depth d = D, D-1, ..., 1 sends every position of depth d's
      half ("reduce") to its parent;
    - broadcast, D steps: the step for depth d = 1, ..., D sends every parent's complete half
      ("copy") to its children of depth d.

    Each GPU sends at most N bytes per step, and the latency grows with log p, not p. One GPU:
    no steps. `ranks` as in ring_allreduce_schedule: any distinct GPU ids in any order, any
    count p (odd too); positions, not ids, make the trees.
    Raises ValueError as ring_allreduce_schedule does.
    """
    raise NotImplementedError("implement double_binary_tree_allreduce_schedule (lectures/13-the-cluster.md, section 5)")


def recursive_halving_doubling_allreduce_schedule(ranks: list[int], nbytes: int) -> dict:
    """Rabenseifner's all-reduce of `nbytes` over `ranks` (gpus = ranks), p a power of two, p
    chunks; position i is ranks[i] and starts holding chunks 0..p-1:

    - reduce-scatter by recursive halving, log2 p steps: step k = 0, 1, ... pairs position i with
      i XOR d, d = p / 2^(k+1) (the farthest partner first, as Thakur, Rabenseifner and Gropp
      2005 write it); each halves the range it holds, keeps the lower half if i & d is 0 (the
      upper half otherwise) and sends the other half ("reduce") to its partner;
    - all-gather by recursive doubling, the same pairs in reverse order (d = 1, 2, ..., p/2):
      each sends the range it holds complete ("copy"), and the two ranges join.

    Each GPU sends 2(p-1)/p * N bytes, like a ring, in 2 log2 p steps instead of 2(p - 1); but
    its first step sends N/2 to the farthest partner, across nodes once p > gpus_per_node.
    `ranks` as in ring_allreduce_schedule (any distinct GPU ids in any order): the partner of
    position i is position i XOR d, never GPU id XOR d.
    Raises ValueError as ring_allreduce_schedule does, and for p that is not a power of two.
    """
    raise NotImplementedError("implement recursive_halving_doubling_allreduce_schedule (lectures/13-the-cluster.md, section 5)")


def hierarchical_alltoall_schedule(cluster: Cluster, nbytes: int) -> dict:
    """All-to-all over every GPU of `cluster` (gpus = 0 .. P-1), each GPU sending `nbytes` in P
    blocks of nbytes / P (block s * P + d goes from GPU s to GPU d), rail-aligned in two steps:

    1. inside each node, GPU (node a, local l) sends to every other GPU (a, l') of its node
       the blocks of (a, l) bound for local rank l' on every node (n blocks);
    2. across nodes, GPU (a, l) sends to GPU (b, l) of every other node b, in one message, every
       block of node a bound for (b, l): g blocks, gathered in step 1, on l's own rail.

    Per GPU: g - 1 messages over NVLink, then n - 1 over the network instead of P - 1 (fewer,
    larger messages: the message cost is paid n + g - 2 times instead of P - 1), and none
    changes rail: no spine hop within a pod, and a rail-only cluster can run it. A step with
    nothing to send (g = 1 or n = 1) is left out.
    Raises ValueError for a cluster that is not a Cluster or nbytes that is not an int >= 0 (a
    float or a bool is refused, as in ring_allreduce_schedule).
    """
    raise NotImplementedError("implement hierarchical_alltoall_schedule (lectures/13-the-cluster.md, section 8)")


def collective_step(
    name: str, args: tuple, tensor: torch.Tensor, group: dist.ProcessGroup | None = None
) -> torch.Tensor:
    """Given (the grader calls it on every rank): build the schedule `name`(*args), a function
    of this file (an all-reduce or an all-to-all), and run it on this rank's `tensor` with the
    given executor (grader.models.cluster.run_schedule) in `group`; returns what the executor
    returns."""
    return run_schedule(globals()[name](*args), tensor, group)
