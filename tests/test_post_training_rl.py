"""Module post_training, engine.py and rl.py: the given engine against TinyGPT's own forward, and
the hidden suite's reference (grader/suites/post_training/rl_reference.py) against torch.

- The engine (given code the students rely on) computes, through its paged KV cache, the logits
  TinyGPT's forward computes on the whole sequence (prefill and decode, float64, tp = 1; the
  tensor-parallel path is checked by the hidden suite's world of 4, whose weights and metrics
  equal the reference's), and its samples do not depend on max_batch.
- The reference's hand-written Adam equals torch.optim.Adam (default betas and eps).
- The reference's wrong loops, used by the hidden suite to name a mistake, really differ from the
  off-policy loop on the suite's configuration (else the message could name the wrong mistake),
  and off-policy differs from on-policy from step 1 only.
"""

from __future__ import annotations

import pytest
import torch
from conftest import load_solution

from grader.suites.post_training import rl_reference as R


@pytest.fixture(scope="module")
def rl():
    return load_solution("post_training", "rl.py")


def test_engine_prefill_and_decode_logits_equal_tinygpt_forward(rl):
    engine_module = load_solution("post_training", "engine.py")
    model = rl.toy_model(3)
    engine = engine_module.Engine.from_model(model)
    config = model.config
    pool = engine_module.BlockPool(16, 3, config.num_layers, config.num_kv_heads, config.head_dim, torch.float64)
    prompts = torch.tensor([[5, 9, 2, 7, 11], [40, 41, 42, 43, 44]])
    for seq in (0, 1):
        pool.reserve(seq, 8)
    with torch.no_grad():
        prefill = engine._forward(pool, [0, 1], prompts)
        torch.testing.assert_close(prefill, model(prompts), rtol=1e-12, atol=1e-12)
        decode = engine._forward(pool, [1, 0], torch.tensor([[3], [4]]))  # the other order
        whole = model(torch.cat([prompts, torch.tensor([[4], [3]])], 1))[:, -1]
    torch.testing.assert_close(decode[:, -1], whole[[1, 0]], rtol=1e-12, atol=1e-12)


def test_engine_samples_do_not_depend_on_max_batch(rl):
    prompts = [[5, 9, 2, 7], [40, 41, 42, 43], [1, 2, 3, 4]] * 3
    seeds = list(range(100, 109))
    results = []
    for max_batch in (1, 4, 16):
        engine = rl.make_engine(3, eos_token_id=None, max_batch=max_batch)
        results.append(engine.generate(prompts, 7, 1.0, seeds))
    for other in results[1:]:
        for (tokens_a, logprobs_a), (tokens_b, logprobs_b) in zip(results[0], other):
            assert torch.equal(tokens_a, tokens_b)
            torch.testing.assert_close(logprobs_a, logprobs_b, rtol=1e-12, atol=1e-12)


def test_reference_adam_equals_torch_adam():
    torch.manual_seed(0)
    ours = [torch.randn(5, 3, dtype=torch.float64) for _ in range(2)]
    theirs = [p.clone().requires_grad_() for p in ours]
    adam, torch_adam = R.Adam(ours, lr=1e-2), torch.optim.Adam(theirs, lr=1e-2)
    for _ in range(4):
        grads = [torch.randn_like(p) for p in ours]
        for p, q, g in zip(ours, theirs, grads):
            p.grad, q.grad = g.clone(), g.clone()
        adam.step()
        torch_adam.step()
    for p, q in zip(ours, theirs):
        torch.testing.assert_close(p, q.detach(), rtol=1e-13, atol=1e-15)


def test_reference_wrong_loops_differ_from_the_off_policy_loop():
    """The hidden suite's off-policy configuration (3 steps, 4 prompts of 3 completions of 6
    tokens, "token"): each wrong loop differs from the right one from step 1 on."""
    seed = 11
    right = R.train(seed, 3, 4, 3, 6, off_policy=True, normalisation="token")["metrics"]
    on_policy = R.train(seed, 3, 4, 3, 6, normalisation="token")["metrics"]
    assert right[0] == on_policy[0]
    for variant in ("regenerate", "current_old"):
        wrong = R.train(seed, 3, 4, 3, 6, off_policy=True, normalisation="token", variant=variant)["metrics"]
        assert all(abs(wrong[0][k] - right[0][k]) < 1e-12 for k in right[0]), variant  # step 0: on-policy
        assert any(abs(a["loss"] - b["loss"]) > 1e-6 for a, b in zip(wrong[1:], right[1:])), variant
