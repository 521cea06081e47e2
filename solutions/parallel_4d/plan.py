"""What a 4D-parallel step sends, and which grid to run a model on (lecture 12-4d-parallelism,
sections 6 and 7).

comm_volume predicts, for the TinyGPT step of step.py, the bytes each rank hands to each of its
groups. The planner's cost model is for a large model on a real cluster, in bf16, with Megatron's
choices: sequence parallelism inside the tp group, flash attention, (interleaved) 1F1B, ZeRO-1
over dp x cp with its collectives overlapped, the grid in order "tp-cp-dp-pp"; for each grid it
chooses the number of micro-batches, the virtual stages and how many layers to recompute.

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
    ### BEGIN SOLUTION
    tp, cp, dp, pp = (grid.sizes[n] for n in ("tp", "cp", "dp", "pp"))
    if batch % (dp * microbatches) or seq_len % cp:
        raise ValueError(
            f"comm_volume: dp * microbatches = {dp * microbatches} must divide batch = {batch}, "
            f"cp = {cp} must divide seq_len = {seq_len}"
        )
    b, s, d, e = batch // (dp * microbatches), seq_len // cp, config.d_model, element_bytes
    stage = grid.coordinate("pp", rank)
    first, last, blocks = stage == 0, stage == pp - 1, config.num_layers // pp
    hidden = b * s * d

    def all_reduce(p: int, n: float) -> float:
        return 2 * (p - 1) / p * n * e

    kv_block = b * (config.num_kv_heads // tp) * s * config.head_dim  # K or V of one rank
    tp_per_micro = all_reduce(tp, hidden) * (4 * blocks + first + last) + last * 3 * all_reduce(tp, b * s)
    cp_per_micro = blocks * 4 * (cp - 1) * kv_block * e  # 2 all-gathers forward, 2 reduce-scatters back
    pp_per_micro = hidden * e * ((not last) + (not first))
    volume = dict.fromkeys(GROUP_KINDS, 0.0)
    volume["tp"] = microbatches * tp_per_micro
    volume["cp"] = microbatches * cp_per_micro
    volume["pp"] = microbatches * pp_per_micro
    volume["dp-cp"] = all_reduce(dp * cp, _tiny_gpt_parameters(config, tp, stage, pp) + last)
    if pp > 1 and (first or last):
        volume["embedding"] = all_reduce(2, config.vocab_size // tp * d)
    return volume


def _tiny_gpt_parameters(config: TinyGPTConfig, tp: int, stage: int, pp: int) -> int:
    """Parameter elements a rank of pipeline stage `stage` and tp shards holds (model.py)."""
    d, f, hd = config.d_model, config.mlp_ratio * config.d_model, config.head_dim
    sharded = (config.num_heads * hd * d * 2 + 2 * config.num_kv_heads * hd * d + 2 * f * d + f) // tp
    block = sharded + 4 * d + d  # two LayerNorms (weight and bias) and the MLP's output bias
    total = config.num_layers // pp * block
    if stage in (0, pp - 1):
        total += config.vocab_size // tp * d
    if stage == 0:
        total += config.max_seq_len * d
    if stage == pp - 1:
        total += 2 * d
    return total
    ### END SOLUTION


@dataclass(frozen=True)
class Cluster:
    """A cluster as the planner sees it: bandwidths are bytes per second one GPU sends.

    mfu is the fraction of peak_flops a layer's work reaches when its matmuls are large;
    memory_bandwidth (HBM, bytes per second) is what makes small ones slower (matmul_efficiency).
    Left at infinity, every grid computes at mfu."""

    gpus: int
    gpus_per_node: int
    memory_bytes: float
    peak_flops: float
    nvlink_bandwidth: float
    network_bandwidth: float
    mfu: float = 0.4
    memory_bandwidth: float = math.inf


@dataclass(frozen=True)
class Plan:
    tp: int
    cp: int
    pp: int
    dp: int
    microbatches: int
    memory_bytes: float
    step_seconds: float
    virtual_stages: int = 1
    recomputed_layers: int = 0


def matmul_efficiency(cfg: TransformerConfig, cluster: Cluster, rows: float, tp: int) -> float:
    """Given (read it): the fraction of peak_flops one GPU's share of a layer runs at, when each
    of its matmuls multiplies `rows` tokens (b * seq_len / cp: sequence parallelism gathers the
    tp group's tokens before each matmul) by weights cut tp ways.

    An additive roofline (compute time plus memory time, nothing hidden) of one layer's forward,
    per token on one GPU, in bf16:
        flops  f = 2 * (2 d_model head_dim (num_heads + num_kv_heads) + k d_model d_ff) / tp
        bytes  136 * d_model / tp  +  f / rows
    136 = 4 * 34: the 34 bytes per token and d_model that Korthikanti et al. (2022) count in a
    layer's activations, each written and read once forward, and its gradient once backward, by
    the memory-bound work between the matmuls (norms, activation functions, residuals, rotary);
    f / rows: the layer's 2-byte weights, read once per micro-batch (f / 2 weights, 2 bytes each),
    shared by its rows. Then
        efficiency = mfu / (1 + mfu * peak_flops / memory_bandwidth * bytes / f)
    It grows with d_model (the matmuls' work grows as d_model^2, the memory traffic as d_model)
    and with rows, and tends to mfu. Megatron-LM's Table 1 (Narayanan et al. 2021) shows the
    first: 44 % of peak at d_model 2,304, 52 % at 25,600, on the same A100s.
    """
    k = 3 if cfg.gated_mlp else 2
    head_dim = cfg.head_dim or cfg.d_model // cfg.num_heads
    flops = 2 * (2 * cfg.d_model * head_dim * (cfg.num_heads + cfg.num_kv_heads) + k * cfg.d_model * cfg.d_ff) / tp
    traffic = 136 * cfg.d_model / tp + flops / rows
    return cluster.mfu / (1 + cluster.mfu * cluster.peak_flops / cluster.memory_bandwidth * traffic / flops)


def plan_memory(
    cfg: TransformerConfig,
    tp: int,
    cp: int,
    pp: int,
    dp: int,
    global_batch: int,
    seq_len: int,
    microbatches: int | None = None,
    virtual_stages: int = 1,
    recomputed_layers: int | None = None,
    sharded_optimizer: bool = True,
) -> float:
    """Bytes on the busiest GPU (the first pipeline stage) of the grid (tp, cp, pp, dp), running
    m = microbatches micro-batches of b = (global_batch // dp) / m sequences each (m defaults to
    global_batch // dp: one sequence each; // floors when dp does not divide global_batch),
    v = virtual_stages chunks of the model per GPU (interleaved 1F1B; v = 1 is plain 1F1B), and
    r = recomputed_layers of the stage's l = ceil(num_layers / pp) layers recomputed in full
    (None: all l of them):

    model state   Psi = P / (tp * pp) parameters per GPU, P = num_layers * (2 * d_model *
                  num_heads * head_dim + 2 * d_model * num_kv_heads * head_dim + k * d_model *
                  d_ff) + vocab_size * d_model (k = 3 for a gated MLP, else 2; module scaling's
                  parameter_count); bf16 weights and gradients (2 + 2 bytes each) and 12 bytes of
                  fp32 Adam state, sharded over dp * cp (ZeRO-1, Megatron's distributed
                  optimizer) when sharded_optimizer, else held whole: Psi * (4 + 12 / (dp * cp))
                  or Psi * 16.
    activations   with t = b * seq_len / cp tokens a micro-batch puts on a GPU, a layer of a
                  micro-batch in flight keeps 2 * t * d_model / tp bytes (its input) if it is
                  recomputed, else 34 * t * d_model / tp (Korthikanti et al. 2022 with sequence
                  parallelism and flash attention, which keeps no scores): per layer in flight,
                  on average (2 r + 34 (l - r)) / l * t * d_model / tp. Layers in flight on the
                  first stage: l * min(pp, m) when v = 1; min(m * v, (v + 1) * pp - 1) * l / v
                  when v > 1 (chunks of l / v layers held by Megatron's interleaved warm-up).
                  Plus, when r >= 1, one layer's activations while it is recomputed,
                  34 * t * d_model / tp.

    Raises ValueError when m does not divide global_batch // dp, v does not divide l, v > 1 with
    pp = 1, or r is not in 0..l.
    """
    ### BEGIN SOLUTION
    layers = math.ceil(cfg.num_layers / pp)
    m, v, r = _schedule(cfg, pp, dp, global_batch, microbatches, virtual_stages, recomputed_layers)
    optimizer = 12 / (dp * cp) if sharded_optimizer else 12
    state = _parameter_count(cfg) / (tp * pp) * (4 + optimizer)
    tokens = (global_batch // dp) // m * seq_len / cp  # t: one micro-batch's tokens on this GPU
    per_layer = (2 * r + 34 * (layers - r)) / layers * tokens * cfg.d_model / tp
    in_flight = layers * min(pp, m) if v == 1 else min(m * v, (v + 1) * pp - 1) * layers / v
    recomputing = 34 * tokens * cfg.d_model / tp if r else 0.0
    return state + in_flight * per_layer + recomputing
    ### END SOLUTION


### BEGIN SOLUTION
def _parameter_count(cfg: TransformerConfig) -> int:
    head_dim = cfg.head_dim or cfg.d_model // cfg.num_heads
    attention = 2 * cfg.d_model * head_dim * (cfg.num_heads + cfg.num_kv_heads)
    mlp = (3 if cfg.gated_mlp else 2) * cfg.d_model * cfg.d_ff
    return cfg.num_layers * (attention + mlp) + cfg.vocab_size * cfg.d_model


def _schedule(
    cfg: TransformerConfig, pp: int, dp: int, global_batch: int, m: int | None, v: int, r: int | None
) -> tuple[int, int, int]:
    """(m, v, r) with their defaults filled in, or the ValueError the docstrings promise."""
    sequences, layers = global_batch // dp, math.ceil(cfg.num_layers / pp)
    m = sequences if m is None else m
    r = layers if r is None else r
    if m < 1 or sequences % m:
        raise ValueError(f"microbatches = {m} must divide global_batch // dp = {sequences}")
    if v < 1 or layers % v or (v > 1 and pp == 1):
        raise ValueError(f"virtual_stages = {v} must divide the {layers} layers of a stage (and be 1 when pp = 1)")
    if not 0 <= r <= layers:
        raise ValueError(f"recomputed_layers = {r} must be in 0..{layers}, the layers of a stage")
    return m, v, r


### END SOLUTION


def step_seconds(
    cfg: TransformerConfig,
    cluster: Cluster,
    tp: int,
    cp: int,
    pp: int,
    dp: int,
    global_batch: int,
    seq_len: int,
    microbatches: int | None = None,
    virtual_stages: int = 1,
    recomputed_layers: int | None = None,
    sharded_optimizer: bool = True,
) -> float:
    """Predicted seconds of one step (global_batch sequences of seq_len tokens), with m, b, v,
    l, r and P as in plan_memory (same defaults, same ValueErrors), s = seq_len / cp,
    H = num_heads, e = matmul_efficiency(cfg, cluster, b * s, tp):

    compute      F * global_batch * seq_len / (gpus * peak_flops * e), F the FLOPs of a token:
                 (6 + 2 r / l) * P (forward and backward, plus the recomputed forward of r of l
                 layers) + 8 * seq_len * H * head_dim * num_layers (causal attention's two
                 matmuls, 2 * seq_len * H * head_dim per layer forward, counted 4 times:
                 forward, backward twice, and the forward flash attention recomputes)
    bubble       compute * (pp - 1) / (v * m) (interleaved 1F1B; v = 1 is 1F1B's (pp - 1) / m)
    tp           m * (4 l + 2 r) all-reduces of b * s * d_model bf16 elements in the tp group (per
                 layer 2 forward, 2 backward, 2 more in a recomputed forward; sequence
                 parallelism's all-gather + reduce-scatter send what an all-reduce sends)
    cp           m * (4 l + 2 r) * (cp - 1) * b * s * (num_kv_heads / tp) * head_dim * 2 bytes
                 (the all-gathers of K and V forward and in a recomputed forward, the
                 reduce-scatters of their gradients backward)
    pp           v * m * b * s * d_model / tp * 2 bytes per direction a stage sends in: 2
                 directions when pp > 2, 1 when pp = 2, none when pp = 1 (interleaving sends
                 each micro-batch across every GPU v times)
    dp           only what overlap leaves exposed. With sharded_optimizer (ZeRO-1), a
                 reduce-scatter of the Psi bf16 gradients, hidden behind the backward of the last
                 micro-batch (2/3 of compute / m), and an all-gather of the Psi updated weights,
                 hidden behind the forward of the first (1/3 of compute / m): max(0, RS - 2/3 *
                 compute / m) + max(0, AG - 1/3 * compute / m). Without it, one all-reduce of Psi
                 gradients behind the last backward: max(0, AR - 2/3 * compute / m).

    Each group's bytes (ring conventions) go at cluster.nvlink_bandwidth when the group lies
    inside one node, else at cluster.network_bandwidth. In order "tp-cp-dp-pp" a group spans as
    many consecutive ranks as the product of its own size and the sizes before it: tp for "tp",
    tp * cp for "cp", tp * cp * dp for "dp-cp", every rank for "pp"; it lies inside a node when
    that span divides gpus_per_node. A group of 1 sends nothing.
    """
    ### BEGIN SOLUTION
    m, v, r = _schedule(cfg, pp, dp, global_batch, microbatches, virtual_stages, recomputed_layers)
    params, head_dim = _parameter_count(cfg), cfg.head_dim or cfg.d_model // cfg.num_heads
    layers, b, s = math.ceil(cfg.num_layers / pp), (global_batch // dp) // m, seq_len / cp
    per_token = (6 + 2 * r / layers) * params + 8 * seq_len * cfg.num_heads * head_dim * cfg.num_layers
    efficiency = matmul_efficiency(cfg, cluster, b * s, tp)
    compute = per_token * global_batch * seq_len / (cluster.gpus * cluster.peak_flops * efficiency)
    bubble = compute * (pp - 1) / (v * m)

    def seconds(bytes_sent: float, span: int) -> float:
        inside = cluster.gpus_per_node % span == 0
        return bytes_sent / (cluster.nvlink_bandwidth if inside else cluster.network_bandwidth)

    passes = m * (4 * layers + 2 * r)  # collectives of a layer: 2 forward, 2 backward, 2 recomputed
    tp_bytes = passes * 2 * (tp - 1) / tp * b * s * cfg.d_model * 2
    cp_bytes = passes * (cp - 1) * b * s * (cfg.num_kv_heads / tp) * head_dim * 2
    pp_bytes = v * m * b * s * cfg.d_model / tp * 2 * min(pp - 1, 2)
    q, span = dp * cp, tp * cp * dp
    half = seconds((q - 1) / q * params / (tp * pp) * 2, span)  # a reduce-scatter or an all-gather
    backward, forward = 2 / 3 * compute / m, 1 / 3 * compute / m
    if sharded_optimizer:
        exposed = max(0.0, half - backward) + max(0.0, half - forward)
    else:
        exposed = max(0.0, 2 * half - backward)
    communication = seconds(tp_bytes, tp) + seconds(cp_bytes, tp * cp) + seconds(pp_bytes, span * pp) + exposed
    return compute + bubble + communication
    ### END SOLUTION


def plan(
    cfg: TransformerConfig,
    cluster: Cluster,
    global_batch: int,
    seq_len: int,
    full_recompute: bool = False,
    sharded_optimizer: bool = True,
) -> list[Plan]:
    """Every grid (tp, cp, pp, dp) of cluster.gpus GPUs that can run, each once with its fastest
    schedule, fastest first (by step_seconds; ties in increasing (tp, cp, pp, dp)).

    A grid can run when tp divides gpus_per_node (tensor parallelism stays inside a node),
    num_heads and num_kv_heads; cp divides seq_len; pp <= num_layers; dp divides global_batch;
    and some schedule fits: plan_memory <= cluster.memory_bytes.
    A schedule is m (every divisor of global_batch // dp) and v (every divisor of l = ceil(
    num_layers / pp); 1 when pp = 1), with r the fewest recomputed layers, from 0 up to l, that
    fit (r = l always when full_recompute). The grid's schedule is the fastest of those that fit,
    ties to the smaller m, then the smaller v. sharded_optimizer goes to plan_memory and
    step_seconds. Each Plan carries m, v, r, plan_memory and step_seconds of its schedule.
    Raises ValueError when no grid can run.
    """
    ### BEGIN SOLUTION
    plans = []
    for tp, cp, pp in _divisor_triples(cluster.gpus):
        dp = cluster.gpus // (tp * cp * pp)
        if cluster.gpus_per_node % tp or cfg.num_heads % tp or cfg.num_kv_heads % tp:
            continue
        if seq_len % cp or pp > cfg.num_layers or global_batch % dp:
            continue
        best = _fastest_schedule(cfg, cluster, (tp, cp, pp, dp), global_batch, seq_len, full_recompute,
                                 sharded_optimizer)  # fmt: skip
        if best is not None:
            plans.append(best)
    if not plans:
        raise ValueError(f"plan: no grid of {cluster.gpus} GPUs fits the model in {cluster.memory_bytes:.3g} bytes")
    return sorted(plans, key=lambda p: (p.step_seconds, p.tp, p.cp, p.pp, p.dp))


def _fastest_schedule(
    cfg: TransformerConfig,
    cluster: Cluster,
    grid: tuple[int, int, int, int],
    global_batch: int,
    seq_len: int,
    full_recompute: bool,
    sharded_optimizer: bool,
) -> Plan | None:
    tp, cp, pp, dp = grid
    layers = math.ceil(cfg.num_layers / pp)
    best = None
    for m in _divisors(global_batch // dp):
        for v in _divisors(layers) if pp > 1 else [1]:
            for r in [layers] if full_recompute else range(layers + 1):  # the fewest that fit
                memory = plan_memory(cfg, *grid, global_batch, seq_len, m, v, r, sharded_optimizer)
                if memory <= cluster.memory_bytes:
                    seconds = step_seconds(cfg, cluster, *grid, global_batch, seq_len, m, v, r, sharded_optimizer)
                    if best is None or seconds < best.step_seconds:  # strict: ties keep the smaller m, v
                        best = Plan(tp, cp, pp, dp, m, memory, seconds, v, r)
                    break
    return best


def _divisors(n: int) -> list[int]:
    return [k for k in range(1, n + 1) if n % k == 0]


def _divisor_triples(n: int) -> list[tuple[int, int, int]]:
    divisors = _divisors(n)
    return [(a, b, c) for a in divisors for b in divisors for c in divisors if n % (a * b * c) == 0]
    ### END SOLUTION


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


def plan_step(cfg: TransformerConfig, cluster: dict, global_batch: int, seq_len: int, **options) -> list[dict]:
    """Given (the grader calls it): plan on Cluster(**cluster), each Plan as a dict."""
    return [dict(vars(p)) for p in plan(cfg, Cluster(**cluster), global_batch, seq_len, **options)]


def seconds_step(cfg: TransformerConfig, cluster: dict, grids: list[tuple[int, int, int, int]], global_batch: int,
                 seq_len: int, **schedule) -> list[float]:  # fmt: skip
    """Given (the grader calls it): step_seconds on Cluster(**cluster) of each (tp, cp, pp, dp)
    (schedule: the keyword arguments of step_seconds, the same for every grid)."""
    return [step_seconds(cfg, Cluster(**cluster), *grid, global_batch, seq_len, **schedule) for grid in grids]
