"""Hidden-suite reference for sync.py: the engine's shards and the least traffic of a weight sync,
written from the layouts' definitions (lecture 16, section 7), independently of the submission's
module and of its given helpers.

    trainer (FSDP): units (each embedding, each block, the final norm); a unit's parameters in
        named_parameters() order flattened and concatenated, zero-padded to a multiple of t, cut
        into t chunks of c = ceil(numel / t); chunk i covers positions [i c, (i + 1) c).
    engine (tensor parallel, tp ranks per replica): query, key_value and mlp.0 split by rows (heads
        for attention; key_value's keys and values by the same kv heads), out and mlp.2 by
        columns, everything else whole.
"""

from __future__ import annotations

import torch

from grader.models.tiny_gpt import TinyGPT, TinyGPTConfig

CONFIG = TinyGPTConfig(max_seq_len=32)


def unit_of(name: str) -> str:
    parts = name.split(".")
    return ".".join(parts[:2]) if parts[0] == "blocks" else parts[0]


def engine_slice(name: str, full: torch.Tensor, tp_rank: int, tp: int, config: TinyGPTConfig) -> torch.Tensor:
    """Engine tp rank tp_rank's part of parameter `name` (full value `full`)."""
    if name.endswith(("attention.query.weight", "mlp.0.weight", "mlp.0.bias")):
        rows = full.shape[0] // tp
        return full[tp_rank * rows : (tp_rank + 1) * rows].clone()
    if name.endswith(("attention.out.weight", "mlp.2.weight")):
        cols = full.shape[1] // tp
        return full[:, tp_rank * cols : (tp_rank + 1) * cols].clone()
    if name.endswith("attention.key_value.weight"):
        heads = config.num_kv_heads // tp
        rows = heads * config.head_dim  # one rank's rows of the keys, and of the values
        half = config.num_kv_heads * config.head_dim
        start = tp_rank * rows
        return torch.cat([full[start : start + rows], full[half + start : half + start + rows]]).clone()
    return full.clone()


def model(seed: int, dtype: torch.dtype, config: TinyGPTConfig = CONFIG) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in TinyGPT.from_seed(config, seed, dtype).named_parameters()}


def trainer_chunks(params: dict[str, torch.Tensor], index: int, t: int) -> dict[str, torch.Tensor]:
    """Trainer rank `index` (of t)'s chunk of every unit."""
    flat: dict[str, list[torch.Tensor]] = {}
    for name, value in params.items():
        flat.setdefault(unit_of(name), []).append(value.reshape(-1))
    chunks = {}
    for unit, pieces in flat.items():
        whole = torch.cat(pieces)
        c = -(-whole.numel() // t)
        padded = torch.cat([whole, whole.new_zeros(c * t - whole.numel())])
        chunks[unit] = padded[index * c : (index + 1) * c].clone()
    return chunks


def expected_shards(params: dict[str, torch.Tensor], tp_rank: int, tp: int, config: TinyGPTConfig = CONFIG):
    return {name: engine_slice(name, value, tp_rank, tp, config) for name, value in params.items()}


def least_traffic(
    trainer: list[int], engine: list[int], tp: int, element_size: int, config: TinyGPTConfig = CONFIG
) -> tuple[dict[int, int], dict[int, int], int]:
    """(bytes each rank must send, bytes each rank must receive, messages): an element of engine
    rank e's shard comes from the trainer rank whose chunk holds it, unless that is e; messages
    counts the (sender, receiver) pairs that exchange anything."""
    t = len(trainer)
    positions: dict[str, torch.Tensor] = {}
    sizes: dict[str, int] = {}
    offsets: dict[str, int] = {}
    for name, value in model(0, torch.float32, config).items():
        unit = unit_of(name)
        start = offsets.get(unit, 0)
        positions[name] = torch.arange(start, start + value.numel()).view(value.shape)
        offsets[unit] = start + value.numel()
    for unit, numel in offsets.items():
        sizes[unit] = -(-numel // t)
    sent = dict.fromkeys(set(trainer) | set(engine), 0)
    received = dict(sent)
    pairs = set()
    for k, e in enumerate(engine):
        for name, where in positions.items():
            mine = engine_slice(name, where, k % tp, tp, config).reshape(-1)
            owners = torch.bincount(mine // sizes[unit_of(name)], minlength=t).tolist()
            for index, count in enumerate(owners):
                if count and trainer[index] != e:
                    sent[trainer[index]] += count * element_size
                    received[e] += count * element_size
                    pairs.add((trainer[index], e))
    return sent, received, len(pairs)
