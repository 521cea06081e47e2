"""Public tests for rl.py: run them while you work with

    pytest assignments/post_training -k rl

Your functions run in a worker process, never inside pytest, here in one process (a world of
one rank that trains and generates, tp = 1). The hidden suite compares your rollouts, token for
token, with a reference sampler; runs the GRPO step on a world of 4 ranks (engine tp 2),
colocated and disaggregated with rank lists out of order, and compares the updated weights, the
engine's weights and the metrics with a single-process reference in float64; runs the
off-policy loop against the reference's and names the mistake when it matches a wrong loop;
checks that the toy task's mean reward rises over 5 steps; and checks every ValueError.
"""

from __future__ import annotations

import torch

from grader.sandbox import Saved, Step

PROMPTS = torch.tensor([[5, 17, 33, 80], [60, 2, 41, 9], [11, 12, 13, 14]])


def test_generate_rollouts_gives_prompt_major_rows_and_a_share_equals_its_rows(submission):
    args = (3, 6, 1.0, 7)  # group_size, max_new_tokens, temperature, seed
    steps = [
        Step("make_engine", (0,), save_as="engine", send_back=False),
        Step("generate_rollouts", (Saved("engine"), PROMPTS, *args)),
        Step("generate_rollouts", (Saved("engine"), PROMPTS[2:], *args, 2)),
    ]
    whole, share = submission.script(steps).steps[0][1:]
    assert whole["prompt_ids"].shape == (9, 4) and whole["completion_ids"].shape == (9, 6)
    assert torch.equal(whole["prompt_ids"], PROMPTS.repeat_interleave(3, 0)), "row i * group_size + g is prompt i"
    assert whole["group_size"] == 3
    for key in ("prompt_ids", "completion_ids", "completion_mask", "logprobs"):
        # The same tokens; log-probabilities to rounding (a batch of another size rounds otherwise).
        assert torch.allclose(share[key], whole[key][6:], rtol=1e-12, atol=1e-12), (
            f"{key}: prompt 2 given alone with first_prompt=2 must sample exactly as in the whole batch"
        )


def test_generate_rollouts_masks_and_pads_after_the_end_token(submission):
    """An engine whose end token is 17: pad with it after it, mask 0 and logprob 0 there."""
    steps = [
        Step("make_engine", (0,), {"eos_token_id": 17}, save_as="engine", send_back=False),
        Step("generate_rollouts", (Saved("engine"), PROMPTS, 8, 10, 2.0, 3)),
    ]
    got = submission.script(steps).steps[0][1]
    ids, mask, logprobs = got["completion_ids"], got["completion_mask"], got["logprobs"]
    lengths = mask.sum(1)
    for row in range(ids.shape[0]):
        n = int(lengths[row])
        assert mask[row, :n].eq(1).all() and mask[row, n:].eq(0).all(), f"row {row}: mask is 1s then 0s"
        assert ids[row, : n - 1].ne(17).all(), f"row {row}: a completion ends at its first end token"
        if n < ids.shape[1]:
            assert ids[row, n - 1] == 17 and ids[row, n:].eq(17).all(), f"row {row}: ended early, padded with 17"
        assert logprobs[row, n:].eq(0).all() and logprobs[row, :n].le(0).all(), f"row {row}: logprobs"


def test_grpo_step_in_one_process_updates_the_engine_and_starts_at_zero_kl(submission):
    steps = [
        Step("make_worker", (0, [0], [0], 1), save_as="worker", send_back=False),
        Step("gather_rollouts", (Saved("worker"), PROMPTS[:2], 4, 6, 1.0, 0), save_as="batch"),
        Step("grpo_step", (Saved("worker"), Saved("batch"))),
        Step("worker.state"),
    ]
    _, batch, metrics, state = submission.script(steps).steps[0]
    assert set(metrics) == {"mean_reward", "kl", "loss"}
    assert abs(metrics["kl"]) < 1e-12, "the policy equals the reference before the first update: KL 0"
    rewards = submission.function("toy_reward")(batch["prompt_ids"], batch["completion_ids"], batch["completion_mask"])
    assert abs(metrics["mean_reward"] - float(rewards.mean())) < 1e-12
    # One trainer rank holds each unit whole: the engine must hold the same values (tp = 1).
    for unit, chunk in state["chunks"].items():
        names = [n for n in state["engine"] if n == unit or n.startswith(unit + ".")]
        flat = torch.cat([state["engine"][n].reshape(-1) for n in names])
        assert torch.equal(flat, chunk[: flat.numel()]), f"{unit}: the engine must hold the updated weights"


def test_train_grpo_off_policy_step_one_trains_a_batch_of_the_initial_weights(submission):
    """Step 0 is the same either way; step 1 of the off-policy loop trains batch 1 (prompts
    toy_prompts(4, 1, 2), sampling seed 4 + 1) sampled with the initial weights, so its mean
    reward is that batch's under a fresh worker."""
    steps = [
        Step("make_worker", (4, [0], [0], 1), save_as="on", send_back=False),
        Step("train_grpo", (Saved("on"), 2, 2, 4, 6), {"seed": 4}),
        Step("make_worker", (4, [0], [0], 1), save_as="off", send_back=False),
        Step("train_grpo", (Saved("off"), 2, 2, 4, 6), {"seed": 4, "off_policy": True}),
        Step("toy_prompts", (4, 1, 2)),
    ]
    results = submission.script(steps).steps[0]
    on, off, prompts = results[1], results[3], results[4]
    assert len(on) == len(off) == 2
    assert on[0] == off[0], "step 0 trains batch 0 sampled with the initial weights in both loops"
    stale = submission.script(
        [
            Step("make_worker", (4, [0], [0], 1), save_as="fresh", send_back=False),
            Step("gather_rollouts", (Saved("fresh"), prompts, 4, 6, 1.0, 4 + 1)),
        ]
    ).steps[0][1]
    reward = submission.function("toy_reward")(stale["prompt_ids"], stale["completion_ids"], stale["completion_mask"])
    assert abs(off[1]["mean_reward"] - float(reward.mean())) < 1e-12, (
        "off-policy step 1 must train batch 1 generated before step 0's update"
    )
