"""Trusted references for the kv_cache suites, run in the grader's process (or a trusted
worker), never importing the submission: generation by full recomputation with the given
TinyGPT, a cache that is known to be right, and a dictionary model of the paged cache."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from grader.models.tiny_gpt import TinyGPT, TinyGPTConfig

CONFIG = {"vocab_size": 97, "max_seq_len": 1024, "num_layers": 2, "d_model": 64, "num_heads": 4, "num_kv_heads": 2}
DTYPES = {"float32": torch.float32, "float64": torch.float64}


def model(seed: int, dtype: str = "float32", config: dict | None = None) -> TinyGPT:
    return TinyGPT.from_seed(TinyGPTConfig(**(config or CONFIG)), seed, DTYPES[dtype])


@torch.no_grad()
def generate_by_recomputation(
    net: TinyGPT, prompt: torch.Tensor, max_new_tokens: int, temperature: float = 0.0, seed: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(tokens, logits) for a (batch, len) prompt: the whole sequence through the model every step."""
    ids = prompt
    generator = torch.Generator().manual_seed(seed) if temperature > 0 else None
    tokens, logits = [], []
    for _ in range(max_new_tokens):
        last = net(ids)[:, -1]
        if temperature == 0:
            token = last.argmax(-1)
        else:
            token = torch.multinomial(torch.softmax(last / temperature, -1), 1, generator=generator)[:, 0]
        tokens.append(token)
        logits.append(last)
        ids = torch.cat([ids, token[:, None]], dim=1)
    return torch.stack(tokens, 1), torch.stack(logits, 1)


def generate_uncached(seed: int, prompt: torch.Tensor, max_new_tokens: int, config: dict | None = None) -> int:
    """For a trusted worker: build the model and generate greedily by recomputation (timed)."""
    tokens, _ = generate_by_recomputation(model(seed, config=config), prompt, max_new_tokens)
    return int(tokens.numel())


class DenseCache:
    """A cache known to be right (torch.cat per step), to count the FLOPs of a cached decode step."""

    def __init__(self, num_layers: int) -> None:
        self.num_layers, self.seq_len = num_layers, 0
        self.keys: dict[int, torch.Tensor] = {}
        self.values: dict[int, torch.Tensor] = {}

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if layer in self.keys:
            k, v = torch.cat([self.keys[layer], k], 2), torch.cat([self.values[layer], v], 2)
        self.keys[layer], self.values[layer] = k, v
        if layer == self.num_layers - 1:
            self.seq_len = k.shape[2]
        return k, v


def generate_steps(model_seed: int, dtype: str, prompt: object, max_new_tokens: int, **options: object) -> list:
    """A worker script: build the given model with the student's build_model, then generate."""
    from grader.sandbox import Saved, Step

    return [
        Step("build_model", (CONFIG, model_seed, dtype), save_as="model", send_back=False),
        Step("generate", (Saved("model"), prompt, max_new_tokens), dict(options)),
    ]


@dataclass
class PagedModel:
    """The paged cache as dictionaries: what every sequence holds, and which abstract blocks it
    shares with which. Predicts results, errors and free-block counts of every operation."""

    num_blocks: int
    block_size: int
    num_layers: int
    contents: dict[int, list[list[tuple[torch.Tensor, torch.Tensor]]]] = field(default_factory=dict)
    tables: dict[int, list[int]] = field(default_factory=dict)
    refs: dict[int, int] = field(default_factory=dict)
    next_block: int = 0

    def free_count(self) -> int:
        return self.num_blocks - len(self.refs)

    def _new_block(self) -> int:
        self.next_block += 1
        self.refs[self.next_block] = 1
        return self.next_block

    def _release(self, block: int) -> None:
        self.refs[block] -= 1
        if self.refs[block] == 0:
            del self.refs[block]

    def apply(self, op: tuple) -> str | None:
        """Apply `op` and return None, or the name of the error it must raise (state unchanged)."""
        name, *args = op
        if name == "add":
            (seq,) = args
            if seq in self.tables:
                return "ValueError"
            self.tables[seq], self.contents[seq] = [], [[] for _ in range(self.num_layers)]
        elif name == "fork":
            parent, child = args
            if parent not in self.tables:
                return "KeyError"
            if child in self.tables:
                return "ValueError"
            for block in self.tables[parent]:
                self.refs[block] += 1
            self.tables[child] = list(self.tables[parent])
            self.contents[child] = [list(rows) for rows in self.contents[parent]]
        elif name == "free":
            (seq,) = args
            if seq not in self.tables:
                return "KeyError"
            for block in self.tables.pop(seq):
                self._release(block)
            del self.contents[seq]
        elif name == "append":
            seq, layer, k, v = args
            if seq not in self.tables:
                return "KeyError"
            table, start = self.tables[seq], len(self.contents[seq][layer])
            end = start + k.shape[0]
            touched = range(start // self.block_size, min(math.ceil(end / self.block_size), len(table)))
            shared = [i for i in touched if self.refs[table[i]] > 1]
            new = max(0, math.ceil(end / self.block_size) - len(table))
            if len(shared) + new > self.free_count():
                return "RuntimeError"
            for i in shared:
                self._release(table[i])
                table[i] = self._new_block()
            table.extend(self._new_block() for _ in range(new))
            self.contents[seq][layer].extend(zip(k, v))
        return None

    def gathered(self, seq: int, layer: int, shape: tuple[int, int], dtype: torch.dtype) -> tuple:
        rows = self.contents[seq][layer]
        if not rows:
            empty = torch.zeros((0, *shape), dtype=dtype)
            return empty, empty
        return torch.stack([k for k, _ in rows]), torch.stack([v for _, v in rows])
