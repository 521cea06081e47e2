"""Public tests for the zero module: run them while you work with

    pytest assignments/zero                  (add -s to see what your code prints)

Your functions run in worker processes, never inside pytest; DDP, ShardedOptimizer and
fully_shard run on worlds of 2 and 4 gloo processes, and in process groups that are not the
world, through the given helpers train_ddp, train_sharded and train_fsdp. The hidden suite
checks more models (frozen, tied and unused parameters, a transformer), ZeRO stage 2, torch's
own DistributedDataParallel and ZeroRedundancyOptimizer, and counts: saved activation bytes,
all-reduce calls and elements per step, the overlap with backward, optimizer-state and gradient
bytes per rank, the parameter bytes fully_shard keeps between layers; it also times DDP against
torch's. `make grade` gives the score.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from grader.sandbox import Group, Saved, Step
from grader.testing import assert_matches, generator

WIDTH, STEPS, ROWS = 16, 3, 4


def test_zero_memory_stage_0_is_16_bytes_per_parameter_and_stage_3_divides_it(submission):
    memory = submission.function("zero_memory_per_rank")
    assert math.isclose(memory(1_000_000, 8, 0), 16e6), "plain data parallelism: 2 + 2 + 12 bytes per parameter"
    assert math.isclose(memory(1_000_000, 8, 3), 2e6), "stage 3 shards all 16 bytes over 8 ranks"


def test_checkpointed_forward_matches_the_plain_forward_and_saves_less(submission):
    x = torch.randn(2, 8, generator=generator("public-ckpt"), dtype=torch.float64)
    steps = [
        Step("make_blocks", (6, 8, 0), save_as="blocks", send_back=False),
        Step("checkpointed_forward", (Saved("blocks"), x, 2), send_back=False),
        Step("saved_bytes_and_grads", (6, 8, 1, x, 2)),
        Step("saved_bytes_and_grads", (6, 8, 1, x, None)),
    ]
    got, plain = submission.script(steps).steps[0][-2:]
    assert_matches(got["y"], plain["y"], "output", 1e-12, 1e-12)
    assert_matches(got["x_grad"], plain["x_grad"], "gradient of x", 1e-12, 1e-12)
    for i, (g, want) in enumerate(zip(got["grads"], plain["grads"])):
        assert_matches(g, want, f"gradient of parameter {i}", 1e-12, 1e-12)
    assert got["saved_bytes"] <= 2 * 2 * 8 * 8, (
        f"2 segments should save 2 inputs of 128 bytes, not {got['saved_bytes']}"
    )


class MLP(nn.Module):
    """The given ddp.MLP("plain"), rebuilt here for the single-process reference."""

    def __init__(self) -> None:
        super().__init__()
        self.inp, self.hidden, self.out = (nn.Linear(WIDTH, WIDTH) for _ in range(3))

    def forward(self, x):
        return self.out(torch.tanh(self.hidden(torch.tanh(self.inp(x)))))


def single_process(state, make_optimizer, inputs, targets):
    model = MLP().double()
    model.load_state_dict(state)
    opt = make_optimizer(model.parameters())
    for x, y in zip(inputs, targets):
        opt.zero_grad()
        F.mse_loss(model(x), y).backward()
        opt.step()
    return model.state_dict()


def data(salt: str, ranks: int = 2) -> tuple[dict[str, torch.Tensor], torch.Tensor, torch.Tensor]:
    """A state and batches of ROWS rows per rank in float64: AdamW divides by sqrt(v), which
    would turn float32 rounding (a different order of summation across ranks) into visible
    differences."""
    torch.manual_seed(0)
    state = {k: v.detach().double() for k, v in MLP().state_dict().items()}
    gen = generator(salt)
    inputs, targets = (torch.randn(STEPS, ranks * ROWS, WIDTH, generator=gen, dtype=torch.float64) for _ in range(2))
    return state, inputs, targets


def test_ddp_on_two_ranks_trains_like_one_process(submission):
    state, inputs, targets = data("public-ddp")
    steps = [
        [
            Step(
                "train_ddp",
                (
                    "plain",
                    state if r == 0 else {k: v + 1 for k, v in state.items()},
                    "sgd",
                    0.05,
                    inputs[:, r * ROWS : (r + 1) * ROWS],
                    targets[:, r * ROWS : (r + 1) * ROWS],
                    0.0015,
                ),
            )
        ]
        for r in range(2)
    ]
    got = [rank[-1] for rank in submission.script_spmd(2, steps).steps]
    expected = single_process(state, lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9), inputs, targets)
    for rank in range(2):
        for name, want in expected.items():
            assert_matches(got[rank]["state"][name], want, f"rank {rank}: {name} (rank 1 starts elsewhere)", 1e-5, 1e-6)
    assert got[0]["calls_before_backward_returned"][0] >= 1, "no bucket's all_reduce started during backward"


def test_sharded_optimizer_stage_1_on_two_ranks_trains_like_one_process(submission):
    state, inputs, targets = data("public-zero")
    steps = [
        [
            Step(
                "train_sharded",
                (state, "adamw", 1, 0.01, inputs[:, r * ROWS : (r + 1) * ROWS], targets[:, r * ROWS : (r + 1) * ROWS]),
            )
        ]
        for r in range(2)
    ]
    got = [rank[-1] for rank in submission.script_spmd(2, steps).steps]
    expected = single_process(state, lambda p: torch.optim.AdamW(p, lr=0.01, weight_decay=0.01), inputs, targets)
    for rank in range(2):
        for name, want in expected.items():
            assert_matches(got[rank]["state"][name], want, f"rank {rank}: {name}", 1e-5, 1e-6)
    full = 2 * sum(v.element_size() * v.numel() for v in state.values())  # AdamW: two moments
    assert sum(r["state_bytes"] for r in got) <= full + 8 * len(state), "the optimizer state must be split, not copied"


def test_fully_shard_on_two_ranks_trains_like_one_process(submission):
    state, inputs, targets = data("public-fsdp")
    steps = [
        [
            Step(
                "train_fsdp",
                (
                    "plain",
                    state,
                    "sgd",
                    0.05,
                    inputs[:, r * ROWS : (r + 1) * ROWS],
                    targets[:, r * ROWS : (r + 1) * ROWS],
                ),
            )
        ]
        for r in range(2)
    ]
    got = [rank[-1] for rank in submission.script_spmd(2, steps).steps]
    expected = single_process(state, lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9), inputs, targets)
    for layer in ("inp", "hidden", "out"):
        # Each rank keeps one half of the layer's flattened (weight, bias): 16 * 16 + 16 = 272 elements.
        shards = [got[r]["shards"][layer] for r in range(2)]
        assert [s.numel() for s in shards] == [136, 136], f"{layer}: each rank's flat_shard should hold 136 elements"
        weight, bias = torch.cat(shards).split([WIDTH * WIDTH, WIDTH])
        assert_matches(
            weight.view(WIDTH, WIDTH), expected[f"{layer}.weight"], f"{layer}.weight from the shards", 1e-5, 1e-6
        )
        assert_matches(bias, expected[f"{layer}.bias"], f"{layer}.bias from the shards", 1e-5, 1e-6)
    bound = 8 * 3 * 136 + 8 * 272 + 1024  # the shards, one layer, and a little for activations
    resident = max(max(step) for step in got[0]["resident_bytes"])
    assert resident <= bound, f"rank 0 held {resident} bytes of parameters between layers (at most {bound})"


# A world of 4 ranks split into data-parallel groups, by global rank (group rank i is the i-th):
# the whole world as one group (group=None), or two pairs that each train their own model on their
# own batch at the same time, as the data-parallel groups of a run with 2-way model parallelism do.
LAYOUTS = {"world-of-4": ((0, 1, 2, 3),), "pairs-0-2-and-1-3": ((0, 2), (1, 3))}
GROUP_HINT = "p is dist.get_world_size(group), a rank is dist.get_rank(group), every collective takes group=group"


def sgd(params: Iterable[nn.Parameter]) -> torch.optim.Optimizer:
    return torch.optim.SGD(params, lr=0.05, momentum=0.9)


def adamw(params: Iterable[nn.Parameter]) -> torch.optim.Optimizer:
    return torch.optim.AdamW(params, lr=0.01, weight_decay=0.01)


OPTIMIZERS = {"DDP": sgd, "ShardedOptimizer": adamw, "fully_shard": sgd}


def training_step(
    training: str, start: dict, state: dict, x: torch.Tensor, y: torch.Tensor, group: Group | None
) -> Step:
    """One rank's call of the given helper that trains with `training` over `group`; only DDP
    starts from `start` (its constructor must broadcast the group's rank 0's parameters)."""
    if training == "DDP":
        return Step("train_ddp", ("plain", start, "sgd", 0.05, x, y, 0.0015, group))
    if training == "ShardedOptimizer":
        return Step("train_sharded", (state, "adamw", 1, 0.01, x, y, group))
    return Step("train_fsdp", ("plain", state, "sgd", 0.05, x, y, None, group))


def from_shards(results: list[dict], where: str) -> dict[str, torch.Tensor]:
    """fully_shard's parameters rebuilt from a group's results: group rank r holds chunk r of each
    layer's flat (weight, bias), 16 * 16 + 16 = 272 elements, so 272 / p each."""
    state = {}
    for layer in ("inp", "hidden", "out"):
        shards = [result["shards"][layer] for result in results]
        sizes = [shard.numel() for shard in shards]
        p = len(results)
        assert sizes == [272 // p] * p, (
            f"{where}: {layer}'s flat_shard sizes by group rank are {sizes}, expected {272 // p} each: p is the "
            f"size of the group, not of the world"
        )
        weight, bias = torch.cat(shards).split([WIDTH * WIDTH, WIDTH])
        state[f"{layer}.weight"], state[f"{layer}.bias"] = weight.view(WIDTH, WIDTH), bias
    return state


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("training", ["DDP", "ShardedOptimizer", "fully_shard"])
def test_data_parallel_on_4_ranks_trains_each_group_like_one_process(submission, training: str, layout: str):
    groups = LAYOUTS[layout]
    steps: dict[int, list[Step]] = {}
    expected = {}  # per group: one process trained on the group's whole batch
    for ranks in groups:
        group = Group(ranks) if len(ranks) < 4 else None  # None: the whole world
        state, inputs, targets = data(f"public-{training}-{layout}-{ranks}", len(ranks))
        expected[ranks] = single_process(state, OPTIMIZERS[training], inputs, targets)
        elsewhere = {k: v + 1 for k, v in state.items()}
        for group_rank, rank in enumerate(ranks):
            rows = slice(group_rank * ROWS, (group_rank + 1) * ROWS)
            start = state if group_rank == 0 else elsewhere
            steps[rank] = [training_step(training, start, state, inputs[:, rows], targets[:, rows], group)]
    got = [rank_steps[0] for rank_steps in submission.script_spmd(4, [steps[rank] for rank in range(4)]).steps]
    for ranks in groups:
        layout_shown = (
            "group=None, the whole world" if len(ranks) == 4 else f"group={list(ranks)}, beside the other pair"
        )
        where = f"{training} on a world of 4 ({layout_shown})"
        if training == "fully_shard":
            finals = {"the parameters rebuilt from the shards": from_shards([got[rank] for rank in ranks], where)}
        else:
            finals = {f"group rank {i}'s parameters": got[rank]["state"] for i, rank in enumerate(ranks)}
        for whose, final in finals.items():
            for name, want in expected[ranks].items():
                assert_matches(final[name], want, f"{where}: {whose}, {name} ({GROUP_HINT})", 1e-5, 1e-6)
