"""Public tests for sync.py: run them while you work with

    pytest assignments/post_training -k sync

Your functions run in worker processes, never inside pytest; sync_weights runs on worlds of 2
and 4 gloo processes. The hidden suite runs sync_weights on worlds of 4 and 5 in colocated and
disaggregated placements, with ranks out of order and a trainer of 3 ranks (chunks padded),
compares every engine rank's shards with the full model's, holds each rank's bytes (counted by
the kernel) to the least traffic that sync_bytes computes, checks every ValueError on every rank,
and checks sync_bytes and sync_cost on the docstrings' cases. `make grade` gives the score.
"""

from __future__ import annotations

import pytest
import torch

from grader.models.tiny_gpt import TinyGPT, TinyGPTConfig

CONFIG = TinyGPTConfig(max_seq_len=32)


def unit_chunk(params: dict[str, torch.Tensor], unit: str, index: int, count: int) -> torch.Tensor:
    """Chunk `index` of `count` of a unit (fsdp_shard's layout, written out here)."""
    flat = torch.cat([v.reshape(-1) for n, v in params.items() if n == unit or n.startswith(unit + ".")])
    size = -(-flat.numel() // count)
    return torch.cat([flat, flat.new_zeros(size * count - flat.numel())])[index * size : (index + 1) * size]


def test_sync_weights_on_two_ranks_gives_each_engine_rank_its_tp_shard(submission):
    """Rank 1 trains alone and is the engine's tp rank 0; rank 0 only generates (tp rank 1) and
    has no chunk: it gets the dtype first, then every element of its shard from rank 1."""
    params = {n: p.detach() for n, p in TinyGPT.from_seed(CONFIG, 1, torch.float64).named_parameters()}
    units = ["token_embedding", "position_embedding", "blocks.0", "blocks.1", "norm"]
    chunks = {unit: unit_chunk(params, unit, 0, 1) for unit in units}
    args = [(None, CONFIG, [1], [1, 0], 2), (chunks, CONFIG, [1], [1, 0], 2)]
    got = submission.function("sync_weights").spmd(2, args).outputs
    for rank, tp_rank in ((1, 0), (0, 1)):
        assert list(got[rank]) == list(params), f"rank {rank}: expected every parameter's name in order"
        for name, full in params.items():
            if name.endswith(("query.weight", "mlp.0.weight", "mlp.0.bias")):
                want = full.chunk(2, dim=0)[tp_rank]
            elif name.endswith(("out.weight", "mlp.2.weight")):
                want = full.chunk(2, dim=1)[tp_rank]
            elif name.endswith("key_value.weight"):  # keys of kv head tp_rank, then its values
                want = full.view(2, 2, -1, full.shape[-1])[:, tp_rank].reshape(-1, full.shape[-1])
            else:
                want = full
            assert got[rank][name].dtype == torch.float64, f"rank {rank}: {name} must keep the chunks' dtype"
            assert torch.equal(got[rank][name], want), f"rank {rank} (tp rank {tp_rank}): {name} differs"


def test_sync_weights_colocated_on_four_ranks_gives_both_replicas_the_same_shards(submission):
    """Colocated: ranks 0-3 train (chunk i on rank i) and form two engine replicas of tp 2,
    engine_ranks [2, 0, 3, 1]: ranks 2 and 3 are tp rank 0, ranks 0 and 1 tp rank 1."""
    params = {n: p.detach() for n, p in TinyGPT.from_seed(CONFIG, 2, torch.float64).named_parameters()}
    units = ["token_embedding", "position_embedding", "blocks.0", "blocks.1", "norm"]
    engine = [2, 0, 3, 1]
    args = [({u: unit_chunk(params, u, rank, 4) for u in units}, CONFIG, [0, 1, 2, 3], engine, 2) for rank in range(4)]
    got = submission.function("sync_weights").spmd(4, args).outputs
    name = "blocks.1.attention.query.weight"
    for k, rank in enumerate(engine):
        want = params[name].chunk(2, dim=0)[k % 2]
        assert torch.equal(got[rank][name], want), f"rank {rank} (tp rank {k % 2}): {name} differs"
        assert torch.equal(got[rank]["norm.weight"], params["norm.weight"]), f"rank {rank}: norm.weight differs"
    assert torch.equal(got[2]["blocks.0.mlp.2.weight"], got[3]["blocks.0.mlp.2.weight"]), "replicas differ"


def test_sync_bytes_gives_the_docstrings_disaggregated_example(submission):
    got = submission.function("sync_bytes")(CONFIG, [0, 1], [2, 3], 2)
    assert got == {0: (218112, 0), 1: (216576, 0), 2: (0, 217344), 3: (0, 217344)}, got


def test_sync_cost_gives_the_docstrings_70b_disaggregated_values(submission):
    got = submission.function("sync_cost")(70e9, 2, "disaggregated", 64, 32, 8, overlap_s=0.2)
    assert got["network_s"] == pytest.approx(0.35) and got["hidden_s"] == pytest.approx(0.2), got
    assert got["total_s"] == pytest.approx(0.15), got
