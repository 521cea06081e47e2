"""Hidden suite: the losses of post-training (losses.py), in float64 against the suite's own
formulas (losses_reference.py; the project test checks the solution against TRL 1.16.0).

- completion_logprobs: log_softmax at the targets for shapes that are not powers of two (one
  token, a vocabulary of 2), targets 0 and V - 1; 16-bit logits near 100 computed in float32 and
  rounded once; the gradient; empty batches; the largest tensor it makes (LargestTensor: every
  tensor an operator allocates, torch's composite operators broken into their aten parts) at most
  one sequence's T * V elements; every refusal.
- dpo_loss: the sigmoid loss and its rewards for several betas, margins of +-1000, detached
  rewards and the gradient, every refusal.
- group_advantages: group normalisation for groups of 2 (AIInfra's notebook) to 8 with different
  spreads and eps, groups of equal rewards whose float mean is not exact, scale=False, every
  refusal.
- grpo_loss: prompt and padding masks, an empty completion, ratios across both clip boundaries,
  advantages of both signs and 0, both normalisations, beta 0 without a reference, clip-higher,
  masked tokens holding other values, the gradient (only through logprobs; on-policy with
  old_logprobs the same tensor), every refusal.
"""

from __future__ import annotations

import pytest
import torch

from grader.sandbox import Step
from grader.suites.post_training import losses_reference as ref
from grader.testing import RUN_SEED, assert_matches, expect_exception, generator

LOGPROBS = "completion_logprobs (see its docstring; lecture 16, section 3)"
DPO = "dpo_loss (see its docstring; lecture 16, section 4)"
ADVANTAGES = "group_advantages (see its docstring; lecture 16, section 5)"
GRPO = "grpo_loss (see its docstring; lecture 16, section 5)"
GROUP_NORMALISATION = (
    "GRPO normalises within each group (group normalisation): a completion's advantage is its reward minus "
    "the mean of its group's rewards, divided by the group's standard deviation (unbiased, over the group_size "
    "completions of one prompt) plus eps. Subtracting the mean alone is Dr. GRPO's scale=False; with "
    "scale=True divide by the group's standard deviation"
)
TIGHT = 1e-12


def _logits(gen: torch.Generator, shape: tuple[int, int, int], dtype=torch.float64) -> torch.Tensor:
    return (2.5 * torch.randn(shape, generator=gen, dtype=torch.float64)).to(dtype)


def _targets(gen: torch.Generator, shape: tuple[int, int, int]) -> torch.Tensor:
    """Random token ids with 0 and V - 1 among them (the ends of the vocabulary)."""
    b, t, v = shape
    targets = torch.randint(0, v, (b, t), generator=gen)
    targets.view(-1)[0] = v - 1
    targets.view(-1)[-1] = 0
    return targets


# ---------------------------------------------------------------------------------------------
# completion_logprobs
# ---------------------------------------------------------------------------------------------

SHAPES = [(3, 7, 97), (1, 1, 5), (2, 13, 31), (5, 3, 2)]


@pytest.mark.points(3)
def test_completion_logprobs_equal_log_softmax_at_the_targets(submission):
    """float64 and float32 logits of four shapes (one token, a vocabulary of 2), with targets 0 and
    V - 1: the log_softmax of the logits at each target, in logits' dtype."""
    gen = generator("logprobs-values")
    cases = [(shape, dtype) for shape in SHAPES for dtype in (torch.float64, torch.float32)]
    inputs = [(_logits(gen, shape, dtype), _targets(gen, shape)) for shape, dtype in cases]
    got = submission.script([Step("completion_logprobs", args) for args in inputs]).steps[0]
    for ((shape, dtype), (logits, targets)), out in zip(zip(cases, inputs), got):
        rtol = TIGHT if dtype == torch.float64 else 1e-5
        assert_matches(
            out, ref.logprobs(logits, targets).to(dtype), f"{LOGPROBS}: logits {shape} in {dtype}", rtol, rtol
        )


@pytest.mark.points(2)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bfloat16", "float16"])
def test_completion_logprobs_of_16_bit_logits_are_computed_in_float32_and_rounded_once(submission, dtype):
    """Logits near 100 in 16 bits: the exact log-probabilities of those 16-bit numbers, rounded to
    logits' dtype, to one step of that dtype. In 16-bit arithmetic the log of the sum of
    exponentials is itself rounded to a step of 0.5 (bfloat16) near 100, and so is the answer."""
    gen = generator("logprobs-16-bit", str(dtype))
    shape = (3, 9, 97)
    logits = (3 * torch.randn(shape, generator=gen, dtype=torch.float64) + 100).to(dtype)
    targets = _targets(gen, shape)
    got = submission.function("completion_logprobs")(logits, targets)
    assert isinstance(got, torch.Tensor) and got.dtype == dtype and got.shape == targets.shape, (
        f"{LOGPROBS}: expected a {tuple(targets.shape)} tensor of {dtype}, got "
        f"{getattr(got, 'dtype', type(got).__name__)} of shape {tuple(getattr(got, 'shape', ()))}"
    )
    exact = ref.logprobs(logits, targets)
    error = (got.double() - exact.to(dtype).double()).abs()
    allowed = ref.ulp(exact, dtype)
    worst = int(torch.argmax(error - allowed))
    assert bool((error <= allowed).all()), (
        f"{LOGPROBS}: {dtype} logits near 100, shape {shape}: {int((error > allowed).sum())} of {error.numel()} "
        f"log-probabilities are off by more than one step of {dtype}; worst: got {got.flatten()[worst].item():.6g}, "
        f"exact {exact.flatten()[worst].item():.6g} (seed {RUN_SEED}). Compute each sequence in float32 and round "
        f"the result once: in {dtype} the log-sum-exp near 100 is rounded to a step of "
        f"{ref.ulp(torch.tensor([100.0]), dtype).item():g} before the subtraction"
    )


@pytest.mark.perf
@pytest.mark.points(3)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
def test_completion_logprobs_never_makes_a_tensor_larger_than_one_sequences_logits(submission, dtype, record_property):
    """LargestTensor around the call (no grad): every tensor an operator allocates, with
    torch.logsumexp and its kind broken into their aten parts, holds at most T * V elements."""
    gen = generator("logprobs-largest", str(dtype))
    shape = (6, 11, 97)
    b, t, v = shape
    logits, targets = _logits(gen, shape, dtype), _targets(gen, shape)
    got = submission.function("measure_completion_logprobs")(logits, targets)
    record_property("largest_elements", got["largest"])
    record_property("largest_op", got["largest_op"])
    record_property("allowed_elements", t * v)
    tolerance = 1e-5 if dtype == torch.float32 else 1e-2
    assert_matches(
        got["logprobs"], ref.logprobs(logits, targets).to(dtype), f"{LOGPROBS}: {dtype}", tolerance, tolerance
    )
    assert got["largest"] <= t * v, (
        f"{LOGPROBS}: logits {shape} in {dtype}: the largest tensor made was {got['largest']:,} elements "
        f"({got['largest_op']}); one sequence's logits are T * V = {t * v:,} (all of them: {b * t * v:,}). "
        f"Work one sequence at a time (torch.logsumexp or F.log_softmax over the whole (B, T, V) makes a "
        f"(B, T, V) temporary), as TRL's selective_log_softmax does"
    )


@pytest.mark.points(2)
def test_completion_logprobs_gradient_is_that_of_log_softmax_at_the_targets(submission):
    gen = generator("logprobs-gradient")
    shape = (3, 6, 37)
    logits, targets = _logits(gen, shape), _targets(gen, shape)
    grad_output = torch.randn(shape[:2], generator=gen, dtype=torch.float64)
    got = submission.function("run_with_gradients")(
        "completion_logprobs", (logits, targets), differentiate=(0,), grad_output=grad_output
    )
    leaf = logits.clone().requires_grad_(True)
    ref.logprobs(leaf, targets).backward(grad_output)
    assert got["grads"][0] is not None, f"{LOGPROBS}: the result is not differentiable with respect to logits"
    assert_matches(got["grads"][0], leaf.grad, f"{LOGPROBS}: gradient with respect to logits {shape}", TIGHT, TIGHT)


@pytest.mark.points(1)
def test_completion_logprobs_of_an_empty_batch_or_empty_sequences_are_empty(submission):
    cases = [((0, 4, 11), torch.float64), ((3, 0, 11), torch.float32)]
    inputs = [(torch.zeros(shape, dtype=dtype), torch.zeros(shape[:2], dtype=torch.long)) for shape, dtype in cases]
    got = submission.script([Step("completion_logprobs", args) for args in inputs]).steps[0]
    for (shape, dtype), out in zip(cases, got):
        assert_matches(out, torch.zeros(shape[:2], dtype=dtype), f"{LOGPROBS}: logits {shape}")


@pytest.mark.points(2)
def test_completion_logprobs_refuses_bad_shapes_dtypes_and_targets(submission):
    gen = generator("logprobs-refusals")
    logits = _logits(gen, (2, 5, 7))
    targets = torch.randint(0, 7, (2, 5), generator=gen)
    high, low = targets.clone(), targets.clone()
    high[1, 3], low[0, 2] = 7, -1
    cases = {
        "logits of 2 dimensions (T, V)": (logits[0], targets[0]),
        "targets (2, 6) for logits (2, 5, 7)": (logits, torch.zeros(2, 6, dtype=torch.long)),
        "targets (5, 2) for logits (2, 5, 7)": (logits, targets.t().contiguous()),
        "integer logits": (logits.long(), targets),
        "float targets": (logits, targets.double()),
        "a target equal to V": (logits, high),
        "a target of -1": (logits, low),
    }
    call = submission.function("completion_logprobs")
    for why, args in cases.items():
        try:
            expect_exception("ValueError", lambda args=args: call(*args))
        except AssertionError as error:
            raise AssertionError(f"{LOGPROBS}, {why}: {error}") from None


# ---------------------------------------------------------------------------------------------
# dpo_loss
# ---------------------------------------------------------------------------------------------


def _pairs(gen: torch.Generator, n: int, spread: float = 3.0) -> tuple[torch.Tensor, ...]:
    """Sequence log-probabilities (sums over tens of tokens: tens of nats), the policy near the
    reference."""
    reference = -40 * torch.rand(2, n, generator=gen, dtype=torch.float64) - 5
    policy = reference + spread * torch.randn(2, n, generator=gen, dtype=torch.float64)
    return policy[0], policy[1], reference[0], reference[1]


def _check_dpo(got, pairs, beta, what):
    loss, chosen, rejected = ref.dpo(*pairs, beta)
    dtype = pairs[0].dtype
    tol = TIGHT if dtype == torch.float64 else 1e-5
    assert isinstance(got, (tuple, list)) and len(got) == 3, (
        f"{what}: expected (loss, chosen_rewards, rejected_rewards)"
    )
    assert_matches(got[0], torch.tensor(loss, dtype=torch.float64).to(dtype), f"{what}: loss", tol, tol)
    assert_matches(got[1], torch.tensor(chosen, dtype=torch.float64).to(dtype), f"{what}: chosen_rewards", tol, tol)
    assert_matches(got[2], torch.tensor(rejected, dtype=torch.float64).to(dtype), f"{what}: rejected_rewards", tol, tol)


@pytest.mark.points(3)
def test_dpo_loss_is_the_mean_of_minus_log_sigmoid_of_beta_times_the_margin(submission):
    """Batches of 7 and 1 pairs in float64 and of 5 in float32, beta 0.1, 0.5 and 2: the loss is
    mean(-log sigmoid(beta * ((pc - rc) - (pr - rr)))) and the rewards beta * (p - r)."""
    gen = generator("dpo-values")
    cases = [(7, 0.1, torch.float64), (7, 0.5, torch.float64), (1, 2.0, torch.float64), (5, 0.1, torch.float32)]
    inputs = [tuple(t.to(dtype) for t in _pairs(gen, n)) for n, _, dtype in cases]
    got = submission.script([Step("dpo_loss", pairs, {"beta": beta}) for pairs, (_, beta, _) in zip(inputs, cases)])
    for (n, beta, dtype), pairs, out in zip(cases, inputs, got.steps[0]):
        _check_dpo(out, pairs, beta, f"{DPO}: {n} pairs in {dtype}, beta {beta}")


@pytest.mark.points(1)
def test_dpo_loss_stays_finite_for_large_margins(submission):
    """Margins of +-1000 and +-50 nats: -log sigmoid(-100) = 100 (beta 0.1), not inf; log sigmoid
    of a large margin is 0, not -0 minus rounding."""
    reference_chosen = torch.tensor([-10.0, -10.0, -10.0, -10.0], dtype=torch.float64)
    reference_rejected = torch.tensor([-10.0, -10.0, -10.0, -10.0], dtype=torch.float64)
    policy_chosen = reference_chosen + torch.tensor([1000.0, -1000.0, 50.0, -50.0], dtype=torch.float64)
    pairs = (policy_chosen, reference_rejected.clone(), reference_chosen, reference_rejected)
    got = submission.function("dpo_loss")(*pairs, beta=0.1)
    _check_dpo(got, pairs, 0.1, f"{DPO}: margins of +-1000 and +-50")


@pytest.mark.points(2)
def test_dpo_rewards_are_detached_and_the_loss_differentiates_the_policy(submission):
    """run_with_gradients: the loss requires grad, the rewards do not; d loss / d policy_chosen =
    -beta * sigmoid(-z) / N and d loss / d policy_rejected its opposite."""
    gen = generator("dpo-gradient")
    pairs = _pairs(gen, 6)
    beta = 0.3
    got = submission.function("run_with_gradients")("dpo_loss", pairs, {"beta": beta}, differentiate=(0, 1))
    assert got["requires_grad"] == [True, False, False], (
        f"{DPO}: (loss, chosen_rewards, rejected_rewards) require grad {got['requires_grad']}, expected "
        f"[True, False, False]: the loss is differentiable, the rewards are detached (for logging)"
    )
    z = beta * ((pairs[0] - pairs[2]) - (pairs[1] - pairs[3]))
    want = -beta * torch.sigmoid(-z) / len(z)
    assert_matches(got["grads"][0], want, f"{DPO}: gradient with respect to policy_chosen", TIGHT, TIGHT)
    assert_matches(got["grads"][1], -want, f"{DPO}: gradient with respect to policy_rejected", TIGHT, TIGHT)


@pytest.mark.points(1)
def test_dpo_loss_refuses_mismatched_shapes_empty_batches_and_beta_not_positive(submission):
    gen = generator("dpo-refusals")
    pairs = _pairs(gen, 4)
    cases = {
        "policy_rejected of 3 pairs, the others of 4": ((pairs[0], pairs[1][:3], pairs[2], pairs[3]), {}),
        "reference_chosen (4, 1)": ((pairs[0], pairs[1], pairs[2].unsqueeze(1), pairs[3]), {}),
        "all four (2, 2)": (tuple(p.view(2, 2) for p in pairs), {}),
        "an empty batch": (tuple(p[:0] for p in pairs), {}),
        "beta 0": (pairs, {"beta": 0.0}),
        "beta -0.1": (pairs, {"beta": -0.1}),
    }
    call = submission.function("dpo_loss")
    for why, (args, kwargs) in cases.items():
        try:
            expect_exception("ValueError", lambda args=args, kwargs=kwargs: call(*args, **kwargs))
        except AssertionError as error:
            raise AssertionError(f"{DPO}, {why}: {error}") from None


# ---------------------------------------------------------------------------------------------
# group_advantages
# ---------------------------------------------------------------------------------------------


def _rewards(gen: torch.Generator, groups: int, group_size: int) -> torch.Tensor:
    """Groups of different spreads and means: a correctness score in [0, 1] plus a format bonus,
    scaled per group."""
    spread = torch.rand(groups, 1, generator=gen, dtype=torch.float64) * 3 + 0.1
    shift = torch.randn(groups, 1, generator=gen, dtype=torch.float64)
    return (torch.rand(groups, group_size, generator=gen, dtype=torch.float64) * spread + shift).reshape(-1)


@pytest.mark.points(3)
def test_group_advantages_normalise_each_group_by_its_mean_and_standard_deviation(submission):
    """Groups of 2 (AIInfra's notebook), 3, 5 and 8 completions, 1 to 4 groups of different
    spreads, eps 1e-4 (the default) and 0.5, in float64 and float32."""
    gen = generator("advantages-values")
    cases = [(2, 3, None), (3, 4, None), (5, 2, 0.5), (8, 1, None), (4, 3, 0.01)]
    rewards = [_rewards(gen, groups, size) for size, groups, _ in cases]
    rewards.append(rewards[1].float())
    cases.append((3, 4, None))
    steps = [
        Step("group_advantages", (r, size), {} if eps is None else {"eps": eps})
        for r, (size, _, eps) in zip(rewards, cases)
    ]
    got = submission.script(steps).steps[0]
    for (size, groups, eps), r, out in zip(cases, rewards, got):
        want = ref.advantages(r, size, eps=1e-4 if eps is None else eps).to(r.dtype)
        tol = TIGHT if r.dtype == torch.float64 else 1e-5
        what = f"{ADVANTAGES}: {groups} group(s) of {size} in {r.dtype}, eps {eps or 1e-4:g}, rewards {r.tolist()}"
        try:
            assert_matches(out, want, what, tol, tol)
        except AssertionError as error:
            raise AssertionError(f"{error}. {GROUP_NORMALISATION}") from None


@pytest.mark.points(2)
def test_a_group_of_equal_rewards_has_exactly_zero_advantage(submission):
    """Groups of equal rewards beside a normal group: 0.1 three times (float mean
    0.10000000000000002), 1/3 five times, 0 and 1 (a task no completion or every completion
    solved); scale True and False: exactly 0, never NaN nor rounding noise."""
    gen = generator("advantages-equal")
    normal = _rewards(gen, 1, 3)
    rewards = torch.cat(
        [torch.full((3,), 0.1, dtype=torch.float64), normal, torch.full((3,), 0.0, dtype=torch.float64)]
    )
    fifths = torch.cat([torch.full((5,), 1 / 3, dtype=torch.float64), torch.ones(5, dtype=torch.float64)])
    cases = [(rewards, 3, True), (rewards, 3, False), (fifths, 5, True), (fifths.float(), 5, True)]
    got = submission.script([Step("group_advantages", (r, g), {"scale": s}) for r, g, s in cases]).steps[0]
    for (r, g, scale), out in zip(cases, got):
        want = ref.advantages(r, g, scale=scale).to(r.dtype)
        tol = TIGHT if r.dtype == torch.float64 else 1e-5
        try:  # the groups of unequal rewards beside them are normalised as any other
            assert_matches(out, want, f"{ADVANTAGES}: groups of {g}, scale={scale}, rewards {r.tolist()}", tol, tol)
        except AssertionError as error:
            raise AssertionError(f"{error}. {GROUP_NORMALISATION}" if scale else str(error)) from None
        equal = (r.view(-1, g) == r.view(-1, g)[:, :1]).all(dim=1).repeat_interleave(g)
        assert bool((out[equal] == 0).all()), (
            f"{ADVANTAGES}: groups of {g}, scale={scale}, rewards {r.tolist()}: a group of equal rewards gave "
            f"{out[equal].tolist()}, expected exactly 0 each (not NaN from 0 / 0, and not the rounding noise of "
            f"its floating-point mean): test whether the group's rewards are all equal"
        )


@pytest.mark.points(1)
def test_group_advantages_without_scaling_only_subtract_the_group_mean(submission):
    gen = generator("advantages-unscaled")
    cases = [(_rewards(gen, 3, 4), 4), (_rewards(gen, 2, 2), 2)]
    got = submission.script([Step("group_advantages", (r, g), {"scale": False}) for r, g in cases]).steps[0]
    for (r, g), out in zip(cases, got):
        want = ref.advantages(r, g, scale=False)
        what = f"{ADVANTAGES}: scale=False (Dr. GRPO), groups of {g}, rewards {r.tolist()}"
        assert_matches(out, want, f"{what}: reward minus the group's mean, nothing divided", TIGHT, TIGHT)


@pytest.mark.points(1)
def test_group_advantages_refuse_bad_groups(submission):
    gen = generator("advantages-refusals")
    rewards = _rewards(gen, 2, 3)
    cases = {
        "rewards of shape (2, 3)": (rewards.view(2, 3), 3),
        "integer rewards": (torch.tensor([0, 1, 1, 0]), 2),
        "boolean rewards": (torch.tensor([True, False]), 2),
        "no rewards": (rewards[:0], 3),
        "group_size 1": (rewards, 1),
        "group_size 0": (rewards, 0),
        "7 rewards in groups of 3": (torch.cat([rewards, rewards[:1]]), 3),
        "6 rewards in groups of 4": (rewards, 4),
    }
    call = submission.function("group_advantages")
    for why, args in cases.items():
        try:
            expect_exception("ValueError", lambda args=args: call(*args))
        except AssertionError as error:
            raise AssertionError(f"{ADVANTAGES}, {why}: {error}") from None


# ---------------------------------------------------------------------------------------------
# grpo_loss
# ---------------------------------------------------------------------------------------------


def _grpo_args(batch: dict, ref_logprobs=True) -> tuple:
    return (batch["logprobs"], batch["old"], batch["ref"] if ref_logprobs else None, batch["adv"], batch["mask"])


def _describe(batch: dict) -> str:
    lengths = batch["mask"].sum(1).tolist()
    return f"{len(lengths)} completions with {lengths} masked tokens"


@pytest.mark.points(3)
def test_grpo_loss_per_sequence_is_the_clipped_objective_plus_k3_averaged_per_completion(submission):
    """Prompt and padding masks, an empty completion, ratios across both clip boundaries,
    advantages of both signs and 0; (epsilon, beta) = (0.2, 0.04), (0.1, 0.3), (0.3, 0); the mask
    as bool and as float."""
    gen = generator("grpo-sequence")
    batches = [ref.grpo_batch(gen), ref.grpo_batch(gen, n=5, t=8, empty_rows=())]
    cases = [(batches[0], 0.2, 0.04, False), (batches[0], 0.1, 0.3, True), (batches[1], 0.3, 0.0, False)]
    steps = []
    for batch, epsilon, beta, float_mask in cases:
        args = list(_grpo_args(batch))
        args[4] = args[4].double() if float_mask else args[4]
        steps.append(Step("grpo_loss", tuple(args), {"epsilon": epsilon, "beta": beta}))
    got = submission.script(steps).steps[0]
    for (batch, epsilon, beta, float_mask), out in zip(cases, got):
        want = ref.grpo(*_grpo_args(batch), epsilon=epsilon, beta=beta)
        what = f"{GRPO}: normalisation 'sequence', {_describe(batch)}, epsilon {epsilon}, beta {beta}"
        assert_matches(out, want, f"{what}{', float mask' if float_mask else ''}", TIGHT, TIGHT)


@pytest.mark.points(2)
def test_grpo_loss_per_token_divides_by_the_number_of_masked_tokens(submission):
    """Completions of very different lengths (so that the per-token and per-sequence means
    differ), an empty one among them, beta 0.04 and 0."""
    gen = generator("grpo-token")
    batch = ref.grpo_batch(gen, n=7, t=15)
    cases = [(0.2, 0.04), (0.2, 0.0)]
    steps = [Step("grpo_loss", _grpo_args(batch), {"beta": beta, "normalisation": "token"}) for _, beta in cases]
    got = submission.script(steps).steps[0]
    for (epsilon, beta), out in zip(cases, got):
        want = ref.grpo(*_grpo_args(batch), epsilon=epsilon, beta=beta, normalisation="token")
        per_sequence = ref.grpo(*_grpo_args(batch), epsilon=epsilon, beta=beta)
        assert_matches(
            out,
            want,
            f"{GRPO}: normalisation 'token' (DAPO), {_describe(batch)}, beta {beta}: the sum over every masked "
            f"token divided by their number (the per-sequence mean would be {per_sequence.item():.6g})",
            TIGHT,
            TIGHT,
        )


@pytest.mark.points(2)
def test_grpo_loss_with_beta_zero_skips_the_kl_and_needs_no_reference(submission):
    """beta 0 with reference_logprobs None, and with a reference full of NaN (not computed at all),
    in both normalisations."""
    gen = generator("grpo-beta-zero")
    batch = ref.grpo_batch(gen)
    nan_reference = torch.full_like(batch["ref"], float("nan"))
    cases = [("sequence", None), ("token", None), ("sequence", nan_reference)]
    steps = [
        Step(
            "grpo_loss",
            (batch["logprobs"], batch["old"], r, batch["adv"], batch["mask"]),
            {"beta": 0.0, "normalisation": n},
        )
        for n, r in cases
    ]
    got = submission.script(steps).steps[0]
    for (normalisation, reference), out in zip(cases, got):
        want = ref.grpo(*_grpo_args(batch), beta=0.0, normalisation=normalisation)
        given = "None" if reference is None else "full of NaN"
        assert_matches(
            out, want, f"{GRPO}: beta 0, reference_logprobs {given}, normalisation {normalisation!r}", TIGHT, TIGHT
        )


@pytest.mark.points(2)
def test_grpo_loss_counts_an_empty_completion_in_the_mean_over_sequences(submission):
    """Rows 1 and 3 of 5 have no masked token: per sequence, the loss is the sum of the other three
    completions' means divided by 5 (TRL's clamp(min=1)); a batch with no masked token at all
    gives 0 in both normalisations."""
    gen = generator("grpo-empty")
    batch = ref.grpo_batch(gen, n=5, t=9, empty_rows=(1, 3))
    nothing = dict(batch, mask=torch.zeros_like(batch["mask"]))
    cases = [(batch, "sequence"), (nothing, "sequence"), (nothing, "token")]
    got = submission.script([Step("grpo_loss", _grpo_args(b), {"normalisation": n}) for b, n in cases]).steps[0]
    for (b, normalisation), out in zip(cases, got):
        want = ref.grpo(*_grpo_args(b), normalisation=normalisation)
        assert_matches(
            out,
            want,
            f"{GRPO}: {_describe(b)}, normalisation {normalisation!r}: an empty completion contributes 0 and is "
            f"still counted among the N completions; no masked token at all gives 0",
            TIGHT,
            TIGHT,
        )


@pytest.mark.points(2)
def test_grpo_loss_clip_higher_uses_epsilon_high_above_and_epsilon_below(submission):
    """DAPO's clip-higher: epsilon 0.2 below, epsilon_high 0.28 above (and 0.1 / 0.5), ratios from
    about 0.6 to 1.6 with advantages of both signs."""
    gen = generator("grpo-clip-higher")
    batch = ref.grpo_batch(gen, n=8, t=10, empty_rows=())
    cases = [(0.2, 0.28), (0.1, 0.5)]
    steps = [Step("grpo_loss", _grpo_args(batch), {"epsilon": lo, "epsilon_high": hi, "beta": 0.0}) for lo, hi in cases]
    got = submission.script(steps).steps[0]
    for (low, high), out in zip(cases, got):
        want = ref.grpo(*_grpo_args(batch), epsilon=low, beta=0.0, epsilon_high=high)
        assert_matches(
            out,
            want,
            f"{GRPO}: epsilon {low}, epsilon_high {high}: the ratio is clipped to [1 - epsilon, 1 + epsilon_high]",
            TIGHT,
            TIGHT,
        )


@pytest.mark.points(2)
def test_grpo_loss_ignores_tokens_outside_the_mask(submission):
    """Other finite values (up to +-5 nats) at every masked-out position of the three log-probability
    tensors: the same loss and the same gradient."""
    gen = generator("grpo-masked-out")
    batch = ref.grpo_batch(gen, n=6, t=12)
    noisy = dict(batch)
    outside = ~batch["mask"]
    for key in ("logprobs", "old", "ref"):
        noise = 5 * (torch.rand(batch[key].shape, generator=gen, dtype=torch.float64) * 2 - 1)
        noisy[key] = torch.where(outside, noise - 5, batch[key])
    run = submission.function("run_with_gradients")
    for normalisation in ("sequence", "token"):
        kwargs = {"normalisation": normalisation}
        clean = run("grpo_loss", _grpo_args(batch), kwargs, differentiate=(0,))
        dirty = run("grpo_loss", _grpo_args(noisy), kwargs, differentiate=(0,))
        what = f"{GRPO}: normalisation {normalisation!r}, other values where mask is 0"
        assert_matches(dirty["outputs"][0], clean["outputs"][0], f"{what}: loss", TIGHT, TIGHT)
        assert_matches(dirty["grads"][0], clean["grads"][0], f"{what}: gradient", TIGHT, TIGHT)


@pytest.mark.points(3)
def test_grpo_loss_differentiates_only_logprobs(submission):
    """run_with_gradients with every input requiring grad: logprobs gets the gradient of the
    suite's formula (float64 autograd), old_logprobs, reference_logprobs and advantages none. On
    policy with old_logprobs the very same tensor as logprobs, the ratio is 1 and the gradient is
    that of the policy-gradient objective (-A / length / N per masked token, plus the KL's), not 0."""
    gen = generator("grpo-gradient")
    batch = ref.grpo_batch(gen, n=6, t=10)
    run = submission.function("run_with_gradients")
    for normalisation in ("sequence", "token"):
        kwargs = {"beta": 0.1, "normalisation": normalisation}
        got = run("grpo_loss", _grpo_args(batch), kwargs, differentiate=(0, 1, 2, 3))
        leaf = batch["logprobs"].clone().requires_grad_(True)
        ref.grpo(leaf, batch["old"], batch["ref"], batch["adv"], batch["mask"], beta=0.1, normalisation=normalisation)
        # (ref.grpo builds its result from Python floats: take the gradient of the per-token form)
        per_token = ref.grpo_per_token(leaf, batch["old"], batch["ref"], batch["adv"], 0.2, 0.2, 0.1)
        weights = _weights(batch["mask"], normalisation)
        (per_token * weights).sum().backward()
        what = f"{GRPO}: normalisation {normalisation!r}, beta 0.1"
        assert got["grads"][0] is not None, f"{what}: the loss is not differentiable with respect to logprobs"
        assert_matches(got["grads"][0], leaf.grad, f"{what}: gradient with respect to logprobs", TIGHT, TIGHT)
        names = {1: "old_logprobs", 2: "reference_logprobs", 3: "advantages"}
        leaked = [names[i] for i in names if got["grads"][i] is not None and bool(got["grads"][i].ne(0).any())]
        assert not leaked, (
            f"{what}: gradient reached {leaked}; they are constants (detach them): only the policy being "
            f"trained, logprobs, gets a gradient"
        )
        on_policy = run(
            "grpo_loss", (batch["logprobs"], None, batch["ref"], batch["adv"], batch["mask"]), kwargs,
            differentiate=(0,), same_as={1: 0},
        )  # fmt: skip
        leaf = batch["logprobs"].clone().requires_grad_(True)
        per_token = ref.grpo_per_token(leaf, batch["logprobs"], batch["ref"], batch["adv"], 0.2, 0.2, 0.1)
        (per_token * weights).sum().backward()
        assert on_policy["grads"][0] is not None, f"{what}, on policy: no gradient with respect to logprobs"
        assert_matches(
            on_policy["grads"][0],
            leaf.grad,
            f"{what}, on policy (old_logprobs is logprobs itself): gradient with respect to logprobs (detach "
            f"old_logprobs: exp(logprobs - logprobs) differentiated through both gives 0)",
            TIGHT,
            TIGHT,
        )


def _weights(mask: torch.Tensor, normalisation: str) -> torch.Tensor:
    m = mask.double()
    if normalisation == "sequence":
        return m / m.sum(1, keepdim=True).clamp(min=1) / m.shape[0]
    return m / m.sum().clamp(min=1)


@pytest.mark.points(2)
def test_grpo_loss_refuses_bad_shapes_normalisations_and_epsilons(submission):
    gen = generator("grpo-refusals")
    b = ref.grpo_batch(gen, n=4, t=6)
    lp, old, rf, adv, mask = _grpo_args(b)
    cases = {
        "logprobs of 1 dimension": ((lp[0], old[0], rf[0], adv[:1], mask[0]), {}),
        "old_logprobs (4, 5) for logprobs (4, 6)": ((lp, old[:, :5], rf, adv, mask), {}),
        "mask (4, 5) for logprobs (4, 6)": ((lp, old, rf, adv, mask[:, :5]), {}),
        "reference_logprobs (3, 6) for logprobs (4, 6), beta 0.04": ((lp, old, rf[:3], adv, mask), {}),
        "reference_logprobs None, beta 0.04": ((lp, old, None, adv, mask), {}),
        "advantages (3,) for 4 completions": ((lp, old, rf, adv[:3], mask), {}),
        "advantages (4, 1)": ((lp, old, rf, adv.unsqueeze(1), mask), {}),
        "no completions (N == 0)": ((lp[:0], old[:0], rf[:0], adv[:0], mask[:0]), {}),
        "normalisation 'batch'": ((lp, old, rf, adv, mask), {"normalisation": "batch"}),
        "normalisation 'Sequence'": ((lp, old, rf, adv, mask), {"normalisation": "Sequence"}),
        "epsilon 0": ((lp, old, rf, adv, mask), {"epsilon": 0.0}),
        "epsilon -0.2": ((lp, old, rf, adv, mask), {"epsilon": -0.2}),
        "epsilon_high 0": ((lp, old, rf, adv, mask), {"epsilon_high": 0.0}),
        "beta -0.01": ((lp, old, rf, adv, mask), {"beta": -0.01}),
    }
    call = submission.function("grpo_loss")
    for why, (args, kwargs) in cases.items():
        try:
            expect_exception("ValueError", lambda args=args, kwargs=kwargs: call(*args, **kwargs))
        except AssertionError as error:
            raise AssertionError(f"{GRPO}, {why}: {error}") from None
