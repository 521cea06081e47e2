# Your working copy: replace every `raise NotImplementedError` with your implementation.
# (Generated from the course's reference by `python -m grader sync`.)
"""What a 4D-parallel step sends, and which grid to run a model on (lecture 12-4d-parallelism,
sections 6 and 7).

comm_volume predicts, for the TinyGPT step of step.py, the bytes each rank hands to each of its
groups. The planner's cost model is for a large model on a real cluster, in bf16, with Megatron's
choices: sequence parallelism inside the tp group, full activation recomputation, 1F1B, ZeRO-1
over dp x cp, micro-batches of one sequence, the grid in order "tp-cp-dp-pp".

Ring conventions (module collectives), for N elements of e bytes among p ranks, bytes one rank sends:
    all-reduce 2(p-1)/p * N * e      all-gather of N per rank (p-1) * N * e
    reduce-scatter of N in all (p-1)/p * N * e      point to point N * e
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from grid import GROUP_KINDS, RankGrid

from grader.models.tiny_gpt import TinyGPTConfig
from grader.models.transformer_config import TransformerConfig


def comm_volume(
    config: TinyGPTConfig,
    grid: RankGrid,
    rank: int,
    batch: int,
    seq_len: int,
    microbatches: int,
    element_bytes: int = 8,
) -> dict[str, float]:
    """Bytes `rank` sends in one train_step (step.py), keyed by every kind of GROUP_KINDS (0 for a
    group it sends nothing to), under the ring conventions above. With b = batch / (dp *
    microbatches) sequences of s = seq_len / cp positions per micro-batch, A = b * s * d_model
    elements of a hidden state, and L_s = num_layers / pp blocks on the rank's stage, per
    micro-batch:

    "tp"   every block: 4 all-reduces of A (after attention and after the MLP forward; the
           gradients of their inputs backward); the first stage 1 more (the embedding, forward);
           the last stage 1 more of A (the gradient into the head) and 3 of b * s (the
           vocab-parallel loss's max, sum of exponentials and target logit).
    "cp"   every block: the all-gathers of K and V (b * kv_heads/tp * s * head_dim each per
           rank) forward, the reduce-scatters of their gradients (cp times that in all) backward.
    "pp"   A to the next stage (not on the last) and A of gradient to the previous one (not on
           the first).
    Once per step:
    "dp-cp"      one all-reduce of every parameter element the rank holds, and on the last
                 stage one more of the loss (1 element).
    "embedding"  with pp > 1, on the first and the last stage: one all-reduce of the token
                 embedding's shard, (vocab_size / tp) * d_model, in a group of 2.
    "dp" stays 0: every data-parallel exchange of this step goes through "dp-cp".

    Raises ValueError when dp * microbatches does not divide batch or cp does not divide seq_len.
    """
    raise NotImplementedError("implement comm_volume (lectures/12-4d-parallelism.md, section 6)")


@dataclass(frozen=True)
class Cluster:
    """A cluster as the planner sees it: bandwidths are bytes per second one GPU sends."""

    gpus: int
    gpus_per_node: int
    memory_bytes: float
    peak_flops: float
    nvlink_bandwidth: float
    network_bandwidth: float
    mfu: float = 0.4


@dataclass(frozen=True)
class Plan:
    tp: int
    cp: int
    pp: int
    dp: int
    microbatches: int
    memory_bytes: float
    step_seconds: float


def plan_memory(cfg: TransformerConfig, tp: int, cp: int, pp: int, dp: int, global_batch: int, seq_len: int) -> float:
    """Bytes on the busiest GPU (the first pipeline stage) of the grid (tp, cp, pp, dp):

    model state   Psi = P / (tp * pp) parameters per GPU, P = num_layers * (2 * d_model *
                  num_heads * head_dim + 2 * d_model * num_kv_heads * head_dim + k * d_model *
                  d_ff) + vocab_size * d_model (k = 3 for a gated MLP, else 2; module scaling's
                  parameter_count); bf16 weights and gradients (2 + 2 bytes each) and 12 bytes of
                  fp32 Adam state sharded over dp * cp (ZeRO-1): Psi * (4 + 12 / (dp * cp)).
    activations   full recomputation with sequence parallelism: each of ceil(num_layers / pp)
                  layers keeps its input, 2 * (seq_len / cp) * d_model / tp bytes, for each of the
                  min(pp, global_batch // dp) micro-batches (one sequence each) that 1F1B holds on
                  the first stage (// floors when dp does not divide global_batch, as in
                  step_seconds); plus one layer's activations while it is recomputed,
                  34 * (seq_len / cp) * d_model / tp bytes (Korthikanti et al. 2022, flash
                  attention: no scores kept).
    """
    raise NotImplementedError("implement plan_memory (lectures/12-4d-parallelism.md, section 7)")


# (Write any helper functions you need here.)


def step_seconds(
    cfg: TransformerConfig, cluster: Cluster, tp: int, cp: int, pp: int, dp: int, global_batch: int, seq_len: int
) -> float:
    """Predicted seconds of one step (global_batch sequences of seq_len tokens), nothing overlapped:

    compute      8 * P * global_batch * seq_len FLOPs (6 P per token, plus the recomputed
                 forward's 2 P; P as in plan_memory) at cluster.mfu of every GPU's peak
    bubble       compute * (pp - 1) / m, m = global_batch // dp micro-batches (1F1B; floored
                 when dp does not divide global_batch, not a fraction)
    tp           m * ceil(L / pp) * 6 all-reduces of (seq_len / cp) * d_model bf16 elements in
                 the tp group (2 forward, 2 in the recomputed forward, 2 backward; sequence
                 parallelism's all-gather + reduce-scatter send what an all-reduce sends)
    cp           m * ceil(L / pp) * 6 * (cp - 1) * (seq_len / cp) * (num_kv_heads / tp) * head_dim
                 * 2 bytes (the all-gathers of K and V forward and in the recomputation, the
                 reduce-scatters of their gradients backward)
    pp           m * (seq_len / cp) * d_model / tp * 2 bytes per direction a stage sends in: 2
                 directions when pp > 2, 1 when pp = 2, none when pp = 1
    dp           one all-reduce of Psi = P / (tp * pp) bf16 gradients in the dp * cp group
                 (ZeRO-1's reduce-scatter and all-gather send the same)

    Each group's bytes (ring conventions) go at cluster.nvlink_bandwidth when the group lies
    inside one node, else at cluster.network_bandwidth. In order "tp-cp-dp-pp" a group spans as
    many consecutive ranks as the product of its own size and the sizes before it: tp for "tp",
    tp * cp for "cp", tp * cp * dp for "dp-cp", every rank for "pp"; it lies inside a node when
    that span divides gpus_per_node. A group of 1 sends nothing.
    """
    raise NotImplementedError("implement step_seconds (lectures/12-4d-parallelism.md, section 7)")


def plan(cfg: TransformerConfig, cluster: Cluster, global_batch: int, seq_len: int) -> list[Plan]:
    """Every grid (tp, cp, pp, dp) of cluster.gpus GPUs that can run, fastest first (by
    step_seconds; ties in increasing (tp, cp, pp, dp)). A grid can run when tp divides
    gpus_per_node (tensor parallelism stays inside a node), num_heads and num_kv_heads; cp
    divides seq_len; pp <= num_layers; dp divides global_batch; and plan_memory <=
    cluster.memory_bytes. Each Plan carries microbatches = global_batch / dp, its plan_memory and
    its step_seconds. Raises ValueError when no grid can run.
    """
    raise NotImplementedError("implement plan (lectures/12-4d-parallelism.md, section 7)")


def volume_step(
    config: TinyGPTConfig,
    sizes: dict[str, int],
    order: str,
    groups: dict[str, list[list[int]]],
    ranks: list[int],
    batch: int,
    seq_len: int,
    microbatches: int,
) -> list[dict[str, float]]:
    """Given (the grader calls it): comm_volume of each of `ranks` on the RankGrid of these
    sizes, order and groups (the grader's own, so that rank_grid is graded apart)."""
    grid = RankGrid(sizes=sizes, order=tuple(order.split("-")), groups=groups)
    return [dict(comm_volume(config, grid, rank, batch, seq_len, microbatches)) for rank in ranks]


def plan_step(cfg: TransformerConfig, cluster: dict, global_batch: int, seq_len: int) -> list[dict]:
    """Given (the grader calls it): plan on Cluster(**cluster), each Plan as a dict."""
    return [dict(vars(p)) for p in plan(cfg, Cluster(**cluster), global_batch, seq_len)]


def seconds_step(cfg: TransformerConfig, cluster: dict, grids: list[tuple[int, int, int, int]], global_batch: int,
                 seq_len: int) -> list[float]:  # fmt: skip
    """Given (the grader calls it): step_seconds on Cluster(**cluster) of each (tp, cp, pp, dp)."""
    return [step_seconds(cfg, Cluster(**cluster), *grid, global_batch, seq_len) for grid in grids]
