# Your working copy: replace every `raise NotImplementedError` with your implementation.
# (Generated from the course's reference by `python -m grader sync`.)
"""Weight sync: the trainer's sharded weights into the inference engine's tensor-parallel layout,
every byte counted (lecture 16, section 7).

Two layouts of the same TinyGPT (grader/models/tiny_gpt.py):

    trainer (FSDP, module zero's fully_shard):  the model is cut into units (each embedding, each
        block, the final norm); a unit's parameters, in named_parameters() order, are flattened,
        concatenated, zero-padded at the end to a multiple of the trainer's size t and cut into t
        equal chunks. The trainer's i-th rank keeps chunk i of every unit.
    engine (tensor parallel, module tensor_parallel's layers): each engine replica of tp ranks
        keeps, on its j-th rank, a column-parallel slice of query, key_value and mlp.0 (rows,
        by heads for attention), a row-parallel slice of out and mlp.2 (columns), and whole copies
        of everything else (embeddings, norms, mlp.2's bias).

You write, below the given helpers: sync_weights, the sync itself on a world of ranks (point to
point, every byte counted); sync_bytes, the least traffic of a sync, to reason about before
coding it; sync_cost, a model of the seconds a colocated or a disaggregated placement spends on
it per RL step.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from grader.models.tiny_gpt import TinyGPT, TinyGPTConfig

COLUMN = ("attention.query.weight", "mlp.0.weight", "mlp.0.bias")
ROW = ("attention.out.weight", "mlp.2.weight")
KEY_VALUE = "attention.key_value.weight"
# The dtypes a sync carries, in the order of the code trainer_ranks[0] sends an engine rank that
# holds no chunk of its own (sync_weights).
WIRE_DTYPES = (torch.float64, torch.float32, torch.bfloat16, torch.float16)


def fsdp_units(model: nn.Module) -> dict[str, list[tuple[str, torch.Size]]]:
    """The trainer's units in order, each with its parameters' full names and shapes in
    named_parameters() order: token_embedding, position_embedding, blocks.0, blocks.1, ..., norm."""
    units: dict[str, list[tuple[str, torch.Size]]] = {}
    for name, parameter in model.named_parameters():
        parts = name.split(".")
        unit = ".".join(parts[:2]) if parts[0] == "blocks" else parts[0]
        units.setdefault(unit, []).append((name, parameter.shape))
    return units


def fsdp_shard(model: nn.Module, index: int, count: int) -> dict[str, torch.Tensor]:
    """Chunk `index` of `count` of every unit of `model`: unit name -> 1-D tensor of
    ceil(unit numel / count) elements (the last chunks end in zero padding)."""
    parameters = dict(model.named_parameters())
    shards = {}
    for unit, members in fsdp_units(model).items():
        flat = torch.cat([parameters[name].detach().reshape(-1) for name, _ in members])
        padded = -(-flat.numel() // count) * count  # round up to a multiple of count
        shards[unit] = F.pad(flat, (0, padded - flat.numel())).chunk(count)[index].clone()
    return shards


def tp_kind(name: str) -> str:
    """How the engine splits parameter `name`: "column", "row", "key_value" or "replicated"."""
    if name.endswith(COLUMN):
        return "column"
    if name.endswith(ROW):
        return "row"
    if name.endswith(KEY_VALUE):
        return "key_value"
    return "replicated"


def tp_shard(name: str, full: torch.Tensor, rank: int, tp: int, config: TinyGPTConfig) -> torch.Tensor:
    """The engine's tensor-parallel rank `rank` (of tp) slice of parameter `name`, whose full value
    is `full` (a copy, contiguous).

    column:    rows [rank * n / tp, (rank + 1) * n / tp) of the n output features (query's rows
               are its heads' rows, so rank j holds query heads [j H / tp, (j + 1) H / tp));
    key_value: the fused (2 * kv_heads * head_dim, d) weight is keys then values; rank j holds
               the rows of its kv_heads / tp key heads, then the rows of the same value heads;
    row:       columns [rank * n / tp, (rank + 1) * n / tp) of the n input features;
    replicated: the whole tensor."""
    kind = tp_kind(name)
    if kind == "column":
        return full.chunk(tp, dim=0)[rank].contiguous().clone()
    if kind == "row":
        return full.chunk(tp, dim=1)[rank].contiguous().clone()
    if kind == "key_value":
        heads = full.view(2, config.num_kv_heads, config.head_dim, -1)  # (keys|values, head, dim, d)
        mine = heads.chunk(tp, dim=1)[rank]
        return mine.reshape(-1, full.shape[-1]).contiguous().clone()
    return full.clone()


def sync_weights(
    shards: dict[str, torch.Tensor] | None,
    config: TinyGPTConfig,
    trainer_ranks: list[int],
    engine_ranks: list[int],
    tp: int,
) -> dict[str, torch.Tensor] | None:
    """One weight sync, called on EVERY rank of the default process group (the world) as one
    collective step: the trainer's FSDP chunks in, the engine's tensor-parallel shards out.

    Placement. trainer_ranks lists the t = len(trainer_ranks) global ranks of the trainer: the
    rank at index i of the list holds chunk i (of t) of every unit, as fsdp_shard(model, i, t)
    makes them, and passes them as `shards` (unit name -> 1-D chunk); every other rank passes
    shards=None. engine_ranks lists the engine's global ranks: engine_ranks[k] is tensor-parallel
    rank k % tp of engine replica k // tp (so len(engine_ranks) is a multiple of tp). The two
    lists may overlap (colocated: the same GPUs train and generate), share nothing
    (disaggregated) or anything between, and are in any order (not 0..p-1, not sorted).

    Returns, on engine_ranks[k], {name: tp_shard(name, full, k % tp, tp, config)} for every
    parameter of TinyGPT(config), in named_parameters() order, where full is that parameter's
    value in the trainer's chunks, in the chunks' dtype (bit-exact: nothing is computed, only
    moved). Returns None on a rank that is not an engine rank (a trainer-only rank, or a rank in
    neither list, which takes part and sends nothing).

    Communication: point-to-point only (dist.isend / dist.irecv, or dist.batch_isend_irecv with
    dist.P2POp), on global ranks; collectives are refused. Every byte counts: a trainer rank sends
    an engine rank exactly the elements of the engine rank's shard that lie in the sender's
    chunks, each once, and never padding; an engine rank that is itself a trainer rank takes the
    elements of its own chunks from them, sending itself nothing. Pack what one rank sends
    another into one message (one header each). The elements must reach the engine rank in an
    order both sides compute from (config, trainer_ranks, engine_ranks, tp) alone.
    The dtype: an engine rank that is not a trainer rank holds no chunk to read it from, so
    before the weights trainer_ranks[0] sends each such rank one int64, the index of the chunks'
    dtype in WIRE_DTYPES (tag 1; the weights travel with tag 0). Nothing else is sent. sync_bytes
    counts the weights' bytes. Buffers live on the chunks' device (a rank without chunks: the
    current GPU under NCCL, the CPU under gloo).

    Raises ValueError when tp < 1; trainer_ranks or engine_ranks is empty, holds a rank twice or
    holds a rank outside 0..world_size - 1; len(engine_ranks) is not a multiple of tp; tp does
    not divide num_heads, num_kv_heads and the MLP width (mlp_ratio * d_model). Every rank sees
    the same placement, so every rank raises this ValueError, with the same message (it names
    the placement, not the rank), before any communication. A rank
    also raises ValueError when its own shards do not fit its role (before any communication):
    shards is None on a trainer rank; shards is not None on a rank outside trainer_ranks; its keys
    are not the units of fsdp_units (in any order); a chunk is not 1-D of ceil(unit numel / t)
    elements; the chunks do not share one dtype of WIRE_DTYPES.
    """
    raise NotImplementedError("implement sync_weights (lectures/16-post-training.md, section 7)")


def sync_bytes(
    config: TinyGPTConfig, trainer_ranks: list[int], engine_ranks: list[int], tp: int, bytes_per_element: int = 4
) -> dict[int, tuple[int, int]]:
    """The least traffic of one sync_weights call with this placement: {rank: (bytes sent, bytes
    received)} for every rank in trainer_ranks or engine_ranks (ranks in neither list move
    nothing and are left out), at bytes_per_element bytes per element (4 for float32, 8 for
    float64).

    Engine rank engine_ranks[k] needs every element of its shard tp_shard(name, full, k % tp, tp,
    config) of every parameter; an element lies in exactly one trainer chunk (chunk i of t covers
    positions [i * c, (i + 1) * c) of its unit's flat concatenation, c = ceil(unit numel / t)), and
    the trainer rank holding that chunk sends it, unless it is the engine rank itself (colocated:
    its own chunk is already there). So engine rank e receives (elements of its shard outside its
    own chunks) * bytes_per_element, and a trainer rank sends the sum over engine ranks other than
    itself of the elements of their shards inside its chunks. Padding is never sent; replicated
    parameters (embeddings, norms, mlp.2's bias) are sent to every engine rank whole. The dtype
    code sync_weights sends engine ranks outside trainer_ranks (8 bytes) is not counted.

    For TinyGPTConfig(max_seq_len=32) (99,648 parameters in 5 units) in float32: trainer [0, 1] and
    engine [2, 3] with tp = 2 gives {0: (218112, 0), 1: (216576, 0), 2: (0, 217344), 3: (0,
    217344)} (a tp shard holds 54,336 elements: 9,024 replicated, half of the 90,624 split);
    trainer = engine = [0, 1] with tp = 1 gives (199296, 199296) on each rank (each holds one half
    of every unit and receives the other).

    Raises ValueError when tp < 1; trainer_ranks or engine_ranks is empty, holds a rank twice or
    holds a negative rank; len(engine_ranks) is not a multiple of tp; tp does not divide
    num_heads, num_kv_heads and the MLP width (mlp_ratio * d_model); bytes_per_element < 1.
    """
    raise NotImplementedError("implement sync_bytes (lectures/16-post-training.md, section 7)")


PLACEMENTS = ("colocated", "disaggregated")


def sync_cost(
    num_parameters: float,
    bytes_per_parameter: float,
    placement: str,
    trainer_gpus: int,
    engine_gpus: int,
    tp: int,
    *,
    gpus_per_node: int = 8,
    nvlink_bytes_per_s: float = 450e9,
    nic_bytes_per_s: float = 50e9,
    wake_up_s: float = 0.0,
    overlap_s: float = 0.0,
) -> dict[str, float]:
    """Seconds one RL step spends moving weights from the trainer to the engine, per component:
    {"nvlink_s", "network_s", "wake_up_s", "hidden_s", "total_s"}.

    The model has P = num_parameters parameters of b = bytes_per_parameter bytes (2 for bf16),
    so an engine GPU's tensor-parallel shard is S = P * b / tp bytes (the replicated embeddings
    and norms are neglected). Every GPU has its own NIC of nic_bytes_per_s (8 per node of 8 GPUs,
    as on H100 nodes) and NVLink to the others of its node at nvlink_bytes_per_s (one direction:
    450 GB/s of an H100's 900 GB/s); sending and receiving run at full rate at once; latency and
    the reloading of weights into the engine's kernels' layouts are neglected.

    colocated (trainer_gpus == engine_gpus = g: the same GPUs train, then generate; the engine
        slept while training, its weights and KV cache released, as vLLM's sleep/wake_up and verl's
        hybrid engine do): every GPU already holds 1/g of its shard (its own trainer chunk; the
        model's elements spread evenly over the g chunks), receives (min(g, gpus_per_node) - 1)/g
        of S from the GPUs of its node over NVLink and (g - min(g, gpus_per_node))/g of S from
        other nodes over its NIC, both at once: nvlink_s and network_s are those bytes over those
        bandwidths and the transfer takes the longer. wake_up_s (an input: measured, not
        modelled) is re-allocating the engine's weights and KV cache; it adds to the step.
        Nothing overlaps: the GPUs that would generate are the ones syncing (hidden_s = 0).
    disaggregated (trainer and engine on different GPUs, every engine replica of tp GPUs
        receiving from the trainer over the network, as sync_weights sends, no relaying between
        replicas): nvlink_s = 0; each engine GPU receives S over its NIC, and the trainer sends
        R = engine_gpus / tp copies of the model (P * b each) over its trainer_gpus NICs, so
        network_s = max(S, R * P * b / trainer_gpus) / nic_bytes_per_s. The engine never sleeps
        (wake_up_s must be 0). In asynchronous RL the transfer runs behind up to overlap_s
        seconds of generation (the engine still generating with the previous weights, the new
        ones arriving into a second buffer): hidden_s = min(overlap_s, network_s).
    total_s = max(nvlink_s, network_s) + wake_up_s - hidden_s, the seconds the step waits.

    Worked values (defaults: 450 GB/s NVLink, 50 GB/s NIC, 8 GPUs per node; bf16, b = 2):
      7B, colocated on 8 GPUs, tp 2: S = 7 GB, 7/8 of it over NVLink: nvlink_s = 6.125e9 / 450e9
        = 0.013611 s, network_s = 0, total_s = 0.013611 (+ wake_up_s).
      70B, colocated on 64 GPUs, tp 8: S = 17.5 GB; nvlink_s = 17.5e9 * 7/64 / 450e9 = 0.0042535,
        network_s = 17.5e9 * 56/64 / 50e9 = 0.30625 = total_s.
      70B, disaggregated, 64 trainer GPUs, 32 engine GPUs of tp 8 (R = 4): network_s = max(17.5e9,
        4 * 140e9 / 64) / 50e9 = 0.35 = total_s; with overlap_s = 0.2: hidden_s = 0.2, total_s
        = 0.15.
    total_s never falls when num_parameters or bytes_per_parameter grows, nor (disaggregated)
    when engine_gpus grows at the same tp; it never rises when a bandwidth, tp or overlap_s grows.

    Raises ValueError when placement is not "colocated" or "disaggregated"; num_parameters,
    bytes_per_parameter or a bandwidth is not > 0; trainer_gpus, engine_gpus, tp or gpus_per_node
    is not an integer >= 1; engine_gpus is not a multiple of tp; colocated with trainer_gpus !=
    engine_gpus; colocated with overlap_s > 0; disaggregated with wake_up_s > 0; wake_up_s or
    overlap_s < 0.
    """
    raise NotImplementedError("implement sync_cost (lectures/16-post-training.md, section 7)")


# (Write any helper functions you need here.)
