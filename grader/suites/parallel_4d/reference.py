"""What the parallel_4d suites compare against: one process training the whole TinyGPT on the
whole batch (float64), the shard of each parameter a rank must hold, and the bytes each group
must carry, derived call by call from the layout of the module's docstrings (not from a closed
formula, so that it checks comm_volume's formula independently)."""

from __future__ import annotations

import math
from functools import cache

import torch
import torch.nn.functional as F

from grader.models.process_grid import ProcessGrid
from grader.models.tiny_gpt import TinyGPT, TinyGPTConfig
from grader.sandbox import Step

CONFIG = TinyGPTConfig(vocab_size=16, max_seq_len=8, num_layers=4, d_model=16, num_heads=4, num_kv_heads=2, mlp_ratio=2)
BATCH, SEQ, MICROBATCHES, LR, SEED = 4, 8, 2, 0.1, 5
ORDER = "tp-cp-dp-pp"
KINDS = ("tp", "cp", "dp", "pp", "dp-cp", "embedding")
# (dp, tp, pp, cp): each world of 8 uses three of the four dimensions
MESHES = [(2, 2, 2, 1), (2, 2, 1, 2), (1, 2, 2, 2), (2, 1, 2, 2)]
MESH_16 = (2, 2, 2, 2)  # every dimension, on 16 ranks
# pp = 3 needs a number of layers it divides: one block per stage. With pp >= 3 the "pp" group
# (every stage) and the "embedding" group (the first and last stage only) differ.
CONFIG_L3 = TinyGPTConfig(vocab_size=16, max_seq_len=8, num_layers=3, d_model=16, num_heads=4, num_kv_heads=2,
                          mlp_ratio=2)  # fmt: skip
# tp = 3 needs 3 KV heads, 3 | vocab_size; cp = 3 a sequence of 3k positions (6): groups of 3.
CONFIG_3 = TinyGPTConfig(vocab_size=18, max_seq_len=8, num_layers=3, d_model=24, num_heads=6, num_kv_heads=3,
                         mlp_ratio=2)  # fmt: skip


def sizes_of(mesh: tuple[int, int, int, int]) -> dict[str, int]:
    return dict(zip(("dp", "tp", "pp", "cp"), mesh))


def make_tokens(salt: int, batch: int = BATCH, seq: int = SEQ, vocab_size: int = CONFIG.vocab_size) -> torch.Tensor:
    """A fixed batch (torch.Generator, not the run's seed): every grading sees the same case."""
    return torch.randint(0, vocab_size, (batch, seq + 1), generator=torch.Generator().manual_seed(salt))


def one_process_step(tokens: torch.Tensor, config: TinyGPTConfig = CONFIG, lr: float = LR, seed: int = SEED):
    """Loss and state_dict after one SGD step of the whole model on the whole batch."""
    model = TinyGPT.from_seed(config, seed, torch.float64)
    logits = model(tokens[:, :-1])
    loss = F.cross_entropy(logits.reshape(-1, config.vocab_size), tokens[:, 1:].reshape(-1))
    loss.backward()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter -= lr * parameter.grad
    return loss.item(), {name: value.detach().clone() for name, value in model.state_dict().items()}


def grid_of(sizes: dict[str, int], order: str = ORDER) -> ProcessGrid:
    return ProcessGrid(tp=sizes["tp"], cp=sizes["cp"], pp=sizes["pp"], dp=sizes["dp"], order=order)


def coordinates(sizes: dict[str, int], rank: int) -> dict[str, int]:
    return grid_of(sizes).coordinates(rank)


def expected_groups(sizes: dict[str, int], order: str = ORDER) -> dict[str, list[list[int]]]:
    """Every group of each kind, from the course's ProcessGrid (Megatron-Core's layout)."""
    grid = grid_of(sizes, order)
    groups = {kind: sorted(grid.ranks(kind)) for kind in KINDS if kind != "embedding"}
    groups["embedding"] = [sorted({g[0], g[-1]}) for g in groups["pp"]]
    return groups


def held_names(config: TinyGPTConfig, sizes: dict[str, int], rank: int) -> list[str]:
    """The whole model's parameter names the rank's stage holds."""
    stage, pp = coordinates(sizes, rank)["pp"], sizes["pp"]
    per_stage = config.num_layers // pp
    names = []
    if stage in (0, pp - 1):
        names.append("token_embedding.weight")
    if stage == 0:
        names.append("position_embedding.weight")
    for layer in range(stage * per_stage, (stage + 1) * per_stage):
        for part in (
            "norm_attention.weight", "norm_attention.bias", "attention.query.weight",
            "attention.key_value.weight", "attention.out.weight", "norm_mlp.weight", "norm_mlp.bias",
            "mlp.0.weight", "mlp.0.bias", "mlp.2.weight", "mlp.2.bias",
        ):  # fmt: skip
            names.append(f"blocks.{layer}.{part}")
    if stage == pp - 1:
        names += ["norm.weight", "norm.bias"]
    return names


def shard(name: str, whole: torch.Tensor, t: int, tp: int, config: TinyGPTConfig = CONFIG) -> torch.Tensor:
    """Tensor-parallel shard t of tp of a whole parameter (model.py's table)."""
    if name.endswith("key_value.weight"):
        kv = whole.view(2, config.num_kv_heads, config.head_dim, -1)
        return kv.chunk(tp, 1)[t].reshape(-1, kv.shape[-1])
    if name.endswith(("token_embedding.weight", "query.weight", "mlp.0.weight", "mlp.0.bias")):
        return whole.chunk(tp, 0)[t]
    if name.endswith(("out.weight", "mlp.2.weight")):
        return whole.chunk(tp, 1)[t]
    return whole


def step_4d(sizes: dict[str, int], tokens: torch.Tensor, microbatches: int = MICROBATCHES, measure=("groups",)) -> Step:
    return Step("step_4d", (CONFIG, sizes, ORDER, tokens, microbatches, LR, SEED), measure=measure)


def traffic(config: TinyGPTConfig, sizes: dict[str, int], rank: int, batch: int, seq: int, m: int, e: int = 8):
    """Bytes the rank must send to each kind of group in one step, walking the calls one
    micro-batch and one block at a time (ring conventions of module collectives)."""
    where = coordinates(sizes, rank)
    tp, cp, dp, pp = sizes["tp"], sizes["cp"], sizes["dp"], sizes["pp"]
    first, last = where["pp"] == 0, where["pp"] == pp - 1
    b, s = batch // (dp * m), seq // cp
    hidden = b * s * config.d_model
    kv = b * config.num_kv_heads // tp * s * config.head_dim

    def all_reduce(p: int, n: int) -> float:
        return 2 * (p - 1) / p * n * e

    sent = dict.fromkeys(KINDS, 0.0)
    for _ in range(m):
        if first:
            sent["tp"] += all_reduce(tp, hidden)  # the vocab-parallel embedding's sum
        for _ in range(config.num_layers // pp):
            sent["tp"] += 2 * all_reduce(tp, hidden)  # attention and MLP outputs, forward
            sent["tp"] += 2 * all_reduce(tp, hidden)  # their inputs' gradients, backward
            sent["cp"] += 2 * (cp - 1) * kv * e  # all-gather K and V
            sent["cp"] += 2 * (cp - 1) / cp * (kv * cp) * e  # reduce-scatter dK and dV
        if last:
            sent["tp"] += all_reduce(tp, hidden) + 3 * all_reduce(tp, b * s)  # head input, loss
        else:
            sent["pp"] += hidden * e
        if not first:
            sent["pp"] += hidden * e
    shapes = [shard(n, torch.empty(shape_of(config, n)), 0, tp, config).shape for n in held_names(config, sizes, rank)]
    held = sum(math.prod(shape) for shape in shapes)
    sent["dp-cp"] = all_reduce(dp * cp, held + (1 if last else 0))
    if pp > 1 and (first or last):
        sent["embedding"] = all_reduce(2, config.vocab_size // tp * config.d_model)
    return sent


def shape_of(config: TinyGPTConfig, name: str) -> tuple[int, ...]:
    return _shapes(config)[name]


@cache
def _shapes(config: TinyGPTConfig) -> dict[str, tuple[int, ...]]:
    return {name: tuple(p.shape) for name, p in TinyGPT(config).named_parameters()}


# The planner's cost model (plan.py's docstrings), written term by term.
def parameters(cfg) -> int:
    head_dim = cfg.head_dim or cfg.d_model // cfg.num_heads
    per_layer = 2 * cfg.d_model * cfg.num_heads * head_dim + 2 * cfg.d_model * cfg.num_kv_heads * head_dim
    per_layer += (3 if cfg.gated_mlp else 2) * cfg.d_model * cfg.d_ff
    return cfg.num_layers * per_layer + cfg.vocab_size * cfg.d_model


def schedule(cfg, pp, dp, global_batch, microbatches=None, virtual_stages=1, recomputed_layers=None):
    """(m, b, v, l, r): micro-batches, sequences in each, virtual stages, a stage's layers, the
    recomputed ones, with plan_memory's defaults."""
    layers = -(-cfg.num_layers // pp)
    per_dp = global_batch // dp
    m = per_dp if microbatches is None else microbatches
    return m, per_dp // m, virtual_stages, layers, layers if recomputed_layers is None else recomputed_layers


def memory_terms(cfg, tp, cp, pp, dp, global_batch, seq_len, microbatches=None, virtual_stages=1,
                 recomputed_layers=None, sharded_optimizer=True) -> dict[str, float]:  # fmt: skip
    m, b, v, layers, r = schedule(cfg, pp, dp, global_batch, microbatches, virtual_stages, recomputed_layers)
    psi = parameters(cfg) / (tp * pp)
    unit = b * seq_len / cp * cfg.d_model / tp  # bytes per byte-per-element of one layer's tokens
    if v == 1:
        chunks_held, chunk_layers = min(pp, m), layers
    else:
        chunks_held, chunk_layers = min(m * v, (v + 1) * pp - 1), layers / v
    layer_slots = chunks_held * chunk_layers
    return {
        "weights and gradients": 4 * psi,
        "optimizer": 12 * psi / (dp * cp) if sharded_optimizer else 12 * psi,
        "layers in flight": layer_slots * unit * (2 * r + 34 * (layers - r)) / layers,
        "recomputed layer": 34 * unit if r > 0 else 0.0,
    }


def efficiency(cfg, cluster: dict, rows: float, tp: int) -> float:
    """plan.py's matmul_efficiency (given code), restated."""
    head_dim = cfg.head_dim or cfg.d_model // cfg.num_heads
    matrices = 2 * cfg.d_model * head_dim * (cfg.num_heads + cfg.num_kv_heads)
    matrices += (3 if cfg.gated_mlp else 2) * cfg.d_model * cfg.d_ff
    flops = 2 * matrices / tp
    memory_bandwidth = cluster.get("memory_bandwidth", math.inf)
    traffic = 136 * cfg.d_model / tp + flops / rows
    seconds = flops / (cluster["peak_flops"] * cluster["mfu"]) + traffic / memory_bandwidth
    return flops / cluster["peak_flops"] / seconds


def time_terms(cfg, cluster: dict, tp, cp, pp, dp, global_batch, seq_len, microbatches=None, virtual_stages=1,
               recomputed_layers=None, sharded_optimizer=True) -> dict[str, float]:  # fmt: skip
    m, b, v, layers, r = schedule(cfg, pp, dp, global_batch, microbatches, virtual_stages, recomputed_layers)
    p = parameters(cfg)
    head_dim = cfg.head_dim or cfg.d_model // cfg.num_heads
    s = seq_len / cp
    flops_per_token = 6 * p + 2 * p * r / layers + 4 * 2 * seq_len * cfg.num_heads * head_dim * cfg.num_layers
    rate = cluster["gpus"] * cluster["peak_flops"] * efficiency(cfg, cluster, b * s, tp)
    compute = flops_per_token * global_batch * seq_len / rate

    def at(span: int) -> float:
        inside = cluster["gpus_per_node"] % span == 0
        return cluster["nvlink_bandwidth"] if inside else cluster["network_bandwidth"]

    collectives = m * (4 * layers + 2 * r)
    directions = 0 if pp == 1 else 1 if pp == 2 else 2
    q = dp * cp
    one_pass = (q - 1) / q * p / (tp * pp) * 2 / at(tp * cp * dp)  # reduce-scatter, or all-gather
    backward_of_one, forward_of_one = compute / m * 2 / 3, compute / m / 3
    if sharded_optimizer:
        dp_exposed = max(0.0, one_pass - backward_of_one) + max(0.0, one_pass - forward_of_one)
    else:
        dp_exposed = max(0.0, 2 * one_pass - backward_of_one)
    return {
        "compute": compute,
        "bubble": compute * (pp - 1) / (v * m),
        "tp": collectives * 2 * (tp - 1) / tp * b * s * cfg.d_model * 2 / at(tp),
        "cp": collectives * (cp - 1) * b * s * cfg.num_kv_heads / tp * head_dim * 2 / at(tp * cp),
        "pp": v * m * b * s * cfg.d_model / tp * 2 * directions / at(tp * cp * dp * pp),
        "dp (exposed)": dp_exposed,
    }


def schedules(cfg, cluster: dict, grid, global_batch, seq_len, full_recompute=False, sharded_optimizer=True):
    """plan's candidates for one grid, in its order: every m, then every v, with the fewest r that
    fits; each as (seconds, m, v, r, memory)."""
    pp, dp = grid[2], grid[3]
    layers = -(-cfg.num_layers // pp)
    found = []
    for m in (k for k in range(1, global_batch // dp + 1) if (global_batch // dp) % k == 0):
        for v in (k for k in range(1, layers + 1) if layers % k == 0 and (pp > 1 or k == 1)):
            for r in ([layers] if full_recompute else range(layers + 1)):
                options = dict(microbatches=m, virtual_stages=v, recomputed_layers=r)
                options["sharded_optimizer"] = sharded_optimizer
                memory = sum(memory_terms(cfg, *grid, global_batch, seq_len, **options).values())
                if memory <= cluster["memory_bytes"]:
                    seconds = sum(time_terms(cfg, cluster, *grid, global_batch, seq_len, **options).values())
                    found.append((seconds, m, v, r, memory))
                    break
    return found


def runnable(cfg, cluster: dict, global_batch: int, seq_len: int) -> list[tuple[int, int, int, int]]:
    """Every (tp, cp, pp, dp) of plan's docstring that may run, before the memory test."""
    n, grids = cluster["gpus"], []
    for tp in range(1, n + 1):
        for cp in range(1, n + 1):
            for pp in range(1, n + 1):
                if n % (tp * cp * pp):
                    continue
                dp = n // (tp * cp * pp)
                if cluster["gpus_per_node"] % tp or cfg.num_heads % tp or cfg.num_kv_heads % tp:
                    continue
                if seq_len % cp or pp > cfg.num_layers or global_batch % dp:
                    continue
                grids.append((tp, cp, pp, dp))
    return grids
