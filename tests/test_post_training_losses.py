"""Module post_training, losses.py: the reference solution against TRL 1.16.0, and the counted
memory check of completion_logprobs both ways.

TRL computes its losses inside trainer methods. They are called here unbound, on a stand-in
`self` (types.SimpleNamespace with only the attributes the methods read), never on a built
trainer: GRPOTrainer._compute_loss (trl/trainer/grpo_trainer.py) with a stub of
_get_per_token_logps_and_entropies that returns our per-token log-probabilities, and
DPOTrainer._compute_loss (trl/trainer/dpo_trainer.py) with a stub model whose output carries
per-token log-probabilities (TRL's fused LM head returns them, zero where the labels are -100)
and the reference's sequence log-probabilities precomputed. GRPO's advantages are computed inside
_generate_and_score_completions, which needs a whole trainer and its reward functions: there, the
lines of TRL's code path for scale_rewards="group" (torch.nanmean, trl.trainer.utils.nanstd,
repeat_interleave, / (std + 1e-4)) are reproduced on the same rewards. Everything in float64, on
random inputs with prompt and padding masks and an empty completion.
"""

from __future__ import annotations

import types
from collections import defaultdict
from functools import partial

import pytest
import torch
from conftest import assert_only_failing, grade_variant, load_solution, module_results

trl_utils = pytest.importorskip("trl.trainer.utils")
from trl.trainer.dpo_trainer import DPOTrainer  # noqa: E402 - after the skip: trl is a dev extra
from trl.trainer.grpo_trainer import GRPOTrainer  # noqa: E402

LARGEST = "test_completion_logprobs_never_makes_a_tensor_larger_than_one_sequences_logits"
VALUES = "test_completion_logprobs_equal_log_softmax_at_the_targets"
SIXTEEN_BITS = "test_completion_logprobs_of_16_bit_logits_are_computed_in_float32_and_rounded_once"
grade = partial(grade_variant, "post_training")  # grade(tmp_path, variant, select)


@pytest.fixture(scope="module")
def losses():
    return load_solution("post_training", "losses.py")


def _accelerator() -> types.SimpleNamespace:
    """One process: gathering and reducing change nothing."""
    return types.SimpleNamespace(
        device=torch.device("cpu"),
        num_processes=1,
        gather=lambda x: x,
        gather_for_metrics=lambda x: x,
        reduce=lambda x, reduction="sum": x,
    )


def _grpo_batch(gen: torch.Generator, n: int = 6, t: int = 9) -> dict[str, torch.Tensor]:
    """Completions with leading masked positions (as a prompt's), padding after them, row 2 empty;
    ratios across both clip boundaries; advantages of both signs."""
    mask = torch.zeros(n, t)
    for i in range(n):
        start, length = int(torch.randint(0, 3, (1,), generator=gen)), int(torch.randint(1, t - 2, (1,), generator=gen))
        if i != 2:
            mask[i, start : start + length] = 1
    logp = -3 * torch.rand(n, t, generator=gen, dtype=torch.float64)
    return {
        "logp": logp,
        "old": logp + 0.5 * (2 * torch.rand(n, t, generator=gen, dtype=torch.float64) - 1),
        "ref": logp + 0.4 * torch.randn(n, t, generator=gen, dtype=torch.float64),
        "adv": torch.randn(n, generator=gen, dtype=torch.float64),
        "mask": mask.double(),
    }


def _trl_grpo(batch: dict, loss_type: str, beta: float, epsilon: float) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPOTrainer._compute_loss on a stand-in self; its loss and the gradient of logp."""
    logp = batch["logp"].clone().requires_grad_(True)
    n, t = logp.shape
    stand_in = types.SimpleNamespace(
        _get_per_token_logps_and_entropies=lambda *args, **kwargs: (logp, torch.zeros_like(logp), None),
        aux_loss_enabled=False,
        top_entropy_quantile=1.0,
        off_policy_mask_threshold=None,
        importance_sampling_level="token",
        beta=beta,
        loss_type=loss_type,
        epsilon_low=epsilon,
        epsilon_high=epsilon,
        args=types.SimpleNamespace(use_bias_correction_kl=False, delta=None, steps_per_generation=1),
        use_vllm=False,
        vllm_importance_sampling_correction=False,
        model=types.SimpleNamespace(training=True),
        current_gradient_accumulation_steps=1,
        accelerator=_accelerator(),
        _entropy_bonus_enabled=False,
        _metrics={"train": defaultdict(list), "eval": defaultdict(list)},
    )
    inputs = {
        "prompt_ids": torch.zeros(n, 2, dtype=torch.long),
        "prompt_mask": torch.ones(n, 2, dtype=torch.long),
        "completion_ids": torch.zeros(n, t, dtype=torch.long),
        "completion_mask": batch["mask"],
        "advantages": batch["adv"],
        "old_per_token_logps": batch["old"],
        "ref_per_token_logps": batch["ref"],
        "num_items_in_batch": batch["mask"].sum(),  # dapo: the batch's masked tokens (one process)
    }
    loss = GRPOTrainer._compute_loss(stand_in, None, inputs)
    loss.backward()
    return loss.detach(), logp.grad


@pytest.mark.parametrize(("loss_type", "normalisation"), [("grpo", "sequence"), ("bnpo", "token"), ("dapo", "token")])
@pytest.mark.parametrize("beta", [0.04, 0.0])
def test_grpo_loss_equals_trls_grpo_trainer_loss(losses, loss_type, normalisation, beta):
    """grpo_loss and its gradient = GRPOTrainer._compute_loss's (TRL 1.16.0) for loss_type "grpo"
    (normalisation "sequence") and "bnpo" / "dapo" (normalisation "token"), beta 0.04 and 0 (then
    without a reference), epsilon 0.2, an empty completion in the batch."""
    batch = _grpo_batch(torch.Generator().manual_seed(7))
    want, want_grad = _trl_grpo(batch, loss_type, beta, 0.2)
    logp = batch["logp"].clone().requires_grad_(True)
    reference = batch["ref"] if beta else None
    got = losses.grpo_loss(
        logp, batch["old"], reference, batch["adv"], batch["mask"], epsilon=0.2, beta=beta, normalisation=normalisation
    )
    got.backward()
    torch.testing.assert_close(got.detach(), want, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(logp.grad, want_grad, rtol=1e-12, atol=1e-12)


def test_dpo_loss_equals_trls_dpo_trainer_sigmoid_loss(losses):
    """dpo_loss = DPOTrainer._compute_loss's (TRL 1.16.0, loss_type ["sigmoid"], reference
    log-probabilities precomputed) on 5 pairs of completions of different lengths (padding masked),
    beta 0.1 and 0.7; the rewards = the beta * log-ratios it logs; the gradients of the per-token
    log-probabilities equal."""
    gen = torch.Generator().manual_seed(3)
    pairs, length = 5, 12
    completion_mask = torch.zeros(2 * pairs, length, dtype=torch.long)
    for row in range(2 * pairs):
        completion_mask[row, 3 : 3 + int(torch.randint(1, length - 3, (1,), generator=gen))] = 1
    shift = completion_mask[:, 1:].double()
    per_token = -2 * torch.rand(2 * pairs, length - 1, generator=gen, dtype=torch.float64) * shift
    ref_logps = (-2 * torch.rand(2 * pairs, length - 1, generator=gen, dtype=torch.float64) * shift).sum(1)
    for beta in (0.1, 0.7):
        leaf = per_token.clone().requires_grad_(True)
        outputs = types.SimpleNamespace(
            log_probs=leaf,
            entropy=torch.zeros_like(per_token),
            mean_logits=torch.zeros_like(per_token),
            is_top1=torch.zeros_like(per_token, dtype=torch.bool),
        )
        stand_in = types.SimpleNamespace(
            model=types.SimpleNamespace(training=True),
            accelerator=_accelerator(),
            aux_loss_enabled=False,
            ld_alpha=None,
            precompute_ref_logps=True,
            f_divergence_type="reverse_kl",
            loss_types=["sigmoid"],
            loss_weights=[1.0],
            beta=beta,
            use_weighting=False,
            _metrics={"train": defaultdict(list), "eval": defaultdict(list)},
            _total_train_tokens=0,
            _tp_size=1,
        )
        inputs = {
            "input_ids": torch.zeros(2 * pairs, length, dtype=torch.long),
            "attention_mask": torch.ones(2 * pairs, length, dtype=torch.long),
            "completion_mask": completion_mask,
            "ref_chosen_logps": ref_logps[:pairs],
            "ref_rejected_logps": ref_logps[pairs:],
        }
        want = DPOTrainer._compute_loss(stand_in, lambda outputs=outputs, **kwargs: outputs, inputs, False)
        want.backward()
        mine = per_token.clone().requires_grad_(True)
        sequence = mine.sum(1)
        loss, chosen, rejected = losses.dpo_loss(
            sequence[:pairs], sequence[pairs:], ref_logps[:pairs], ref_logps[pairs:], beta=beta
        )
        loss.backward()
        torch.testing.assert_close(loss.detach(), want.detach(), rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(mine.grad, leaf.grad, rtol=1e-12, atol=1e-12)
        metrics = stand_in._metrics["train"]
        assert chosen.mean().item() == pytest.approx(metrics["rewards/chosen"][-1], rel=1e-12)
        assert rejected.mean().item() == pytest.approx(metrics["rewards/rejected"][-1], rel=1e-12)


def test_group_advantages_equal_trls_group_scaled_advantages(losses):
    """group_advantages = the lines of GRPOTrainer._generate_and_score_completions (TRL 1.16.0)
    for scale_rewards="group" and "none", reproduced on groups of 2, 3 and 8 (one group of equal
    rewards: there TRL's tiny rounding noise, ours exactly 0). TRL's nanstd multiplies the variance
    by count / (count - 1), a true division of two int64 tensors, which torch computes in float32:
    8 / 7 is off by 2e-8 relative (2 / 1 and 3 / 2 are exact), so groups of 8 are compared to
    1e-7 relative, and the others to 1e-12."""
    gen = torch.Generator().manual_seed(5)
    for group_size, groups in ((2, 5), (3, 4), (8, 2)):
        rewards = torch.rand(groups * group_size, generator=gen, dtype=torch.float64) * 3
        rewards[:group_size] = 0.1  # a group of equal rewards
        grouped = rewards.view(-1, group_size)
        mean = torch.nanmean(grouped, dim=1).repeat_interleave(group_size, dim=0)
        std = trl_utils.nanstd(grouped, dim=1).repeat_interleave(group_size, dim=0)
        for scale in (True, False):
            want = rewards - mean
            if scale:
                want = want / (std + 1e-4)
            got = losses.group_advantages(rewards, group_size, scale=scale)
            tol = 1e-7 if scale and group_size == 8 else 1e-12
            torch.testing.assert_close(got, want, rtol=tol, atol=tol)
            assert bool((got[:group_size] == 0).all())


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
def test_completion_logprobs_equal_trls_selective_log_softmax(losses, dtype):
    """completion_logprobs = trl.trainer.utils.selective_log_softmax (TRL 1.16.0) on the same
    logits: to the last bit in float64, to float32's rounding, and in bfloat16 no further from the
    exact float64 answer than TRL's (which takes log_softmax of each bfloat16 row)."""
    gen = torch.Generator().manual_seed(11)
    logits = (3 * torch.randn(4, 10, 50, generator=gen, dtype=torch.float64) + 20).to(dtype)
    targets = torch.randint(0, 50, (4, 10), generator=gen)
    got = losses.completion_logprobs(logits, targets)
    want = trl_utils.selective_log_softmax(logits, targets)
    assert got.dtype == want.dtype == dtype
    if dtype == torch.bfloat16:
        exact = torch.log_softmax(logits.double(), -1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
        assert (got.double() - exact).abs().max() <= (want.double() - exact).abs().max()
    else:
        tol = 1e-12 if dtype == torch.float64 else 1e-5
        torch.testing.assert_close(got, want, rtol=tol, atol=tol)


def test_completion_logprobs_memory_check_passes_the_reference(solutions_results):
    """The reference makes one sequence's logits at most (T * V), and the counter sees it (not 0)."""
    reference = module_results(solutions_results, "post_training")
    for dtype in ("float32", "bfloat16"):
        test = reference[f"{LARGEST}[{dtype}]"]
        assert test["status"] == "passed", test["output"]
        figures = test["extra_data"]
        assert 0 < figures["largest_elements"] <= figures["allowed_elements"], figures


def test_completion_logprobs_with_a_whole_log_softmax_fails_only_the_memory_check(tmp_path):
    """tests/variants/post_training/full_log_softmax.py: F.log_softmax over the whole (B, T, V)
    logits. Its values are right (float32 for 16-bit logits), its largest tensor is B times too
    big."""
    tests = grade(tmp_path, "full_log_softmax", f"{LARGEST} or {VALUES} or {SIXTEEN_BITS}")
    assert_only_failing(tests, LARGEST)
    for dtype in ("float32", "bfloat16"):
        output = tests[f"{LARGEST}[{dtype}]"]["output"]
        assert "the largest tensor made was 6,402 elements (aten." in output, output
