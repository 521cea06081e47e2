"""Public tests for losses.py (log-probabilities of completions, DPO, GRPO): run them while you work
with

    pytest assignments/post_training -k losses

Your functions run in a worker process, never inside pytest. The hidden suite also checks 16-bit
logits, the largest tensor completion_logprobs makes (one sequence's logits at most), gradients,
margins of +-1000, groups of equal rewards, both of GRPO's normalisations with empty completions,
clip-higher, masked tokens, and every refusal; the course's own tests compare the reference with
TRL's trainers. `make grade` gives the score.
"""

from __future__ import annotations

import math

import pytest
import torch


def test_completion_logprobs_pick_the_log_softmax_of_each_target(submission):
    # Two sequences of two positions over a vocabulary of 3.
    logits = torch.tensor(
        [[[0.0, 0.0, 0.0], [1.0, 2.0, 3.0]], [[5.0, 0.0, 0.0], [0.0, 0.0, 10.0]]], dtype=torch.float64
    )
    targets = torch.tensor([[2, 0], [0, 1]])
    got = submission.function("completion_logprobs")(logits, targets)
    lse = math.log(math.exp(1) + math.exp(2) + math.exp(3))
    want = torch.tensor(
        [[-math.log(3), 1 - lse], [5 - math.log(math.exp(5) + 2), -math.log(2 + math.exp(10))]], dtype=torch.float64
    )
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_dpo_loss_of_a_pair_the_policy_already_prefers(submission):
    # The policy raised the chosen completion by 2 nats and lowered the rejected one by 1 against
    # the reference: margin 3, beta 0.5, loss -log sigmoid(1.5).
    policy_chosen, reference_chosen = (
        torch.tensor([-10.0], dtype=torch.float64),
        torch.tensor([-12.0], dtype=torch.float64),
    )
    policy_rejected, reference_rejected = (
        torch.tensor([-9.0], dtype=torch.float64),
        torch.tensor([-8.0], dtype=torch.float64),
    )
    loss, chosen, rejected = submission.function("dpo_loss")(
        policy_chosen, policy_rejected, reference_chosen, reference_rejected, beta=0.5
    )
    assert loss.item() == pytest.approx(math.log1p(math.exp(-1.5)), rel=1e-12)
    assert chosen.tolist() == pytest.approx([1.0]) and rejected.tolist() == pytest.approx([-0.5])


def test_group_advantages_of_two_prompts_with_four_completions_each(submission):
    # Prompt 0: one of four completions correct; prompt 1: all four correct (no signal: 0).
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0], dtype=torch.float64)
    got = submission.function("group_advantages")(rewards, 4)
    std = math.sqrt((0.75**2 + 3 * 0.25**2) / 3)  # unbiased: divided by 4 - 1
    want = [0.75 / (std + 1e-4)] + [-0.25 / (std + 1e-4)] * 3 + [0.0] * 4
    assert got.tolist() == pytest.approx(want, rel=1e-12)


def test_group_advantages_refuse_a_group_of_one(submission):
    from grader.testing import expect_exception

    expect_exception("ValueError", lambda: submission.function("group_advantages")(torch.tensor([1.0, 0.0]), 1))


def test_grpo_loss_on_policy_is_minus_the_mean_advantage_per_sequence(submission):
    # On policy (old = current) the ratio is 1, nothing is clipped; with beta 0 the loss is
    # -mean over sequences of the advantage (each sequence's masked mean of -A is -A). The third
    # completion is empty: it adds 0 and still counts among the 3.
    logprobs = torch.log(torch.tensor([[0.5, 0.25, 0.9], [0.1, 0.2, 0.3], [0.4, 0.4, 0.4]], dtype=torch.float64))
    mask = torch.tensor([[0, 1, 1], [1, 1, 0], [0, 0, 0]])
    advantages = torch.tensor([1.5, -0.3, 2.0], dtype=torch.float64)
    got = submission.function("grpo_loss")(logprobs, logprobs.clone(), None, advantages, mask, beta=0.0)
    assert got.item() == pytest.approx(-(1.5 - 0.3 + 0.0) / 3, rel=1e-12)


def test_grpo_loss_clips_a_ratio_above_one_plus_epsilon_and_adds_k3(submission):
    # One token: ratio exp(0.5) = 1.65 > 1.2 with A = 1: clipped to 1.2, loss -1.2; the reference
    # is 0.1 nat below: k3 = exp(-0.1) + 0.1 - 1.
    logprobs = torch.tensor([[-1.0]], dtype=torch.float64)
    got = submission.function("grpo_loss")(
        logprobs, logprobs - 0.5, logprobs - 0.1, torch.tensor([1.0], dtype=torch.float64), torch.ones(1, 1), beta=0.04
    )
    assert got.item() == pytest.approx(-1.2 + 0.04 * (math.exp(-0.1) + 0.1 - 1), rel=1e-12)
