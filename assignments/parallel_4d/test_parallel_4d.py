"""Public tests for the parallel_4d module: run them while you work with

    pytest assignments/parallel_4d            (add -s to see what each rank prints)

Your functions run in worker processes, one per rank, joined by torch.distributed (gloo). The
hidden suite checks more: rank_grid against Megatron-Core's RankGenerator in every order, one
step on four meshes of 8 ranks against one process, the micro-batches 1F1B holds, the bytes each
of your groups carries (every call counted), and each term of the planner's cost model;
`make grade` gives the score.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from grader.models.tiny_gpt import TinyGPT, TinyGPTConfig
from grader.models.transformer_config import TransformerConfig
from grader.testing import expect_exception

CONFIG = TinyGPTConfig(vocab_size=16, max_seq_len=8, num_layers=2, d_model=16, num_heads=4, num_kv_heads=2, mlp_ratio=2)


def test_rank_grid_of_8_ranks_is_the_module_docstrings_example(submission):
    grid = submission.function("grid_step")(8, tp=2, cp=1, pp=2, dp=2)
    want = {
        "tp": [[0, 1], [2, 3], [4, 5], [6, 7]],
        "dp": [[0, 2], [1, 3], [4, 6], [5, 7]],
        "pp": [[0, 4], [1, 5], [2, 6], [3, 7]],
    }
    want["dp-cp"] = want["dp"]  # cp = 1
    want["embedding"] = want["pp"]  # the first and last rank of each pp group of 2
    for kind, groups in want.items():
        got = grid["groups"].get(kind)
        assert got == groups, f"rank_grid(8, tp=2, cp=1, pp=2, dp=2): groups[{kind!r}]: expected {groups}, got {got}"


def test_rank_grid_refuses_sizes_whose_product_is_not_the_world(submission):
    expect_exception("ValueError", lambda: submission.function("rank_grid")(8, 2, 2, 2, 2))


def test_one_step_on_tp_2_and_pp_2_equals_one_process(submission):
    tokens = torch.randint(0, 16, (4, 9), generator=torch.Generator().manual_seed(0))
    sizes = {"tp": 2, "cp": 1, "pp": 2, "dp": 1}
    result = submission.function("step_4d").spmd(4, [(CONFIG, sizes, "tp-cp-dp-pp", tokens, 2, 0.1, 0)] * 4)
    model = TinyGPT.from_seed(CONFIG, 0, torch.float64)
    loss = F.cross_entropy(model(tokens[:, :-1]).reshape(-1, 16), tokens[:, 1:].reshape(-1))
    loss.backward()
    for rank, out in enumerate(result.outputs):
        stage, t = rank // 2, rank % 2  # order tp-cp-dp-pp: tp changes fastest
        assert (out["loss"] is None) == (stage == 0), f"rank {rank}: the loss only on the last stage"
        if stage == 1:
            assert math.isclose(out["loss"], loss.item(), rel_tol=1e-12), (out["loss"], loss.item())
        query = out["state"][f"blocks.{stage}.attention.query.weight"]
        whole = model.blocks[stage].attention.query
        want = (whole.weight - 0.1 * whole.weight.grad).detach().chunk(2, 0)[t]
        torch.testing.assert_close(query, want, rtol=1e-10, atol=1e-10, msg=f"rank {rank}: query weight shard")


def test_comm_volume_of_tensor_parallelism_alone(submission):
    sizes = {"tp": 2, "cp": 1, "pp": 1, "dp": 1}
    groups = submission.function("grid_step")(2, tp=2, cp=1, pp=1, dp=1)["groups"]
    volume = submission.function("volume_step")(CONFIG, sizes, "tp-cp-dp-pp", groups, [0], 2, 8, 1)[0]
    # 4 all-reduces per block, 1 for the embedding, 1 into the head: 2 * 4 + 2 = 10 of b*s*d = 256
    # float64 elements, each sending 2(p-1)/p = 1 of it; plus 3 of the loss's b*s = 16.
    assert volume["tp"] == 10 * 256 * 8 + 3 * 16 * 8
    assert volume["pp"] == volume["cp"] == volume["dp-cp"] == volume["embedding"] == 0


def test_plan_memory_on_one_gpu_is_16_bytes_a_parameter_plus_activations(submission):
    cfg = TransformerConfig(num_layers=2, d_model=64, num_heads=4, num_kv_heads=4, d_ff=256, vocab_size=100)
    params = 2 * (4 * 64 * 64 + 2 * 64 * 256) + 100 * 64
    memory = submission.function("plan_memory")(cfg, 1, 1, 1, 1, 1, 128)
    assert math.isclose(memory, 16 * params + 2 * 2 * 128 * 64 + 34 * 128 * 64), memory
