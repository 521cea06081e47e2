"""Hidden suite: rl.py, the GRPO loop as a system (lecture 16, sections 6 and 8).

Everything is compared with rl_reference.py, one process written from the formulas (a TinyGPT
forward over the whole sequence per sampled token, the batch's loss at once, Adam from its
definition), in float64:
- rollouts: generate_rollouts on a one-rank engine equals the reference sampler token for token
  (log-probabilities to 1e-9); a share of the batch given with its first_prompt equals those rows
  of the whole batch, and an engine of max_batch 2 (requests admitted as others finish) gives
  the same rollouts; with an end token the engine samples often, completions end early and are
  padded with it, masked and with log-probability 0 after it;
- one GRPO step on a world of 4 (engine tp 2): colocated (every rank trains and generates,
  two replicas) and disaggregated (trainer ranks [3, 1], one replica on [2, 0], lists not
  sorted) both equal the reference: the weights rebuilt from the trainer's FSDP chunks, the
  metrics on every rank, and each engine rank's weights, which must be the tp_shard of the
  updated weights (rebuilt here from the layout, not from sync.py);
- a batch with most completions ended early, trained in one process: the metrics and weights
  show whether prompt tokens or padding entered the loss;
- the off-policy loop (trainer ranks [1, 2, 3, 0], engine [3, 2], "token" normalisation, 3
  steps) equals the reference's off-policy loop; a failure says whether the submission matches
  the loop that regenerates every batch with the current weights, or the one that takes
  old_logprobs from the policy being trained;
- the mean reward of the toy task rises over 5 steps with seed 2 (the reference's curve:
  0.438, 0.609, 0.711, 0.750, 0.883): the last step at least 0.3 above the first, the mean of
  the last two at least 0.2 above the mean of the first two (measured 0.445 and 0.293);
- every ValueError of the docstrings.
Seeds of the model and of sampling are drawn per grading (GRADER_SEED replays them), except the
reward curve's, which is the reference's seed 2.
"""

from __future__ import annotations

import pytest
import torch

from grader.models.tiny_gpt import TinyGPT
from grader.sandbox import Saved, Step
from grader.suites.post_training import rl_reference as R
from grader.testing import assert_matches, expect_exception, generator

TOL = (1e-9, 1e-10)
PROMPTS, GROUP, NEW = 4, 3, 6  # 4 prompts split over 4 trainers, 2 replicas; groups of 3
COLOCATED = ([0, 1, 2, 3], [0, 1, 2, 3], 2)
DISAGGREGATED = ([3, 1], [2, 0], 2)
OFF_POLICY = ([1, 2, 3, 0], [3, 2], 2)
REWARD_SEED, REWARD_STEPS = 2, 5

RUNS: dict[tuple, object] = {}


def seed_of(*salt: object) -> int:
    return int(torch.randint(0, 10_000, (1,), generator=generator("post-rl", *salt)))


def stubs_first(submission, *names: str) -> None:
    """A function still the stub says "not implemented" at once, before the costly reference and
    world run (a stub is answered from its source, without a worker)."""
    for name in names:
        if submission.still_the_stub(name):
            submission.function(name)()


def cached(key: tuple, make):
    if key not in RUNS:
        RUNS[key] = make()
    return RUNS[key]


# ---------------------------------------------------------------------------- layouts


def units() -> dict[str, list[tuple[str, torch.Size]]]:
    """sync.fsdp_units' layout: each embedding, each block, the final norm."""
    out: dict[str, list] = {}
    for name, parameter in TinyGPT(R.CONFIG).named_parameters():
        parts = name.split(".")
        out.setdefault(".".join(parts[:2]) if parts[0] == "blocks" else parts[0], []).append((name, parameter.shape))
    return out


def rebuild(chunks_by_index: list[dict], where: str) -> dict[str, torch.Tensor]:
    """Every parameter from the trainer ranks' chunks (index order)."""
    full = {}
    for unit, members in units().items():
        for i, chunks in enumerate(chunks_by_index):
            assert chunks is not None and unit in chunks, f"{where}: trainer index {i} returned no chunk of {unit}"
        flat = torch.cat([chunks[unit] for chunks in chunks_by_index])
        offset = 0
        for name, shape in members:
            full[name] = flat[offset : offset + shape.numel()].view(shape)
            offset += shape.numel()
    return full


def tp_slice(name: str, full: torch.Tensor, rank: int, tp: int) -> torch.Tensor:
    """sync.tp_shard's layout, written again."""
    if name.endswith(("attention.query.weight", "mlp.0.weight", "mlp.0.bias")):
        return full.chunk(tp, 0)[rank]
    if name.endswith(("attention.out.weight", "mlp.2.weight")):
        return full.chunk(tp, 1)[rank]
    if name.endswith("attention.key_value.weight"):
        heads = full.view(2, R.CONFIG.num_kv_heads, R.CONFIG.head_dim, -1).chunk(tp, 1)[rank]
        return heads.reshape(-1, full.shape[-1])
    return full


# ---------------------------------------------------------------------------- rollouts


def rollout_case(submission) -> tuple[list, dict]:
    """One worker: the whole batch, its share from prompt 1 on, the same with max_batch 2, and an
    engine whose end token is the one the model samples most. Run once per submission."""

    stubs_first(submission, "generate_rollouts")

    def make():
        seed, sample_seed = seed_of("rollout-model"), seed_of("rollout-sample")
        prompts = R.prompts_of(seed_of("rollout-prompts"), 0, 3)
        temperature = 1.3
        model = R.initial_model(seed)
        whole = R.rollouts(model, prompts, GROUP, NEW, temperature, sample_seed)
        counts = torch.bincount(whole["completion_ids"].reshape(-1), minlength=R.CONFIG.vocab_size)
        end = int(counts.argmax())  # the most sampled token: completions end early
        ended = R.rollouts(model, prompts, GROUP, NEW, temperature, sample_seed, end=end)
        args = (GROUP, NEW, temperature, sample_seed)
        steps = [
            Step("make_engine", (seed,), save_as="engine", send_back=False),
            Step("make_engine", (seed,), {"max_batch": 2}, save_as="narrow", send_back=False),
            Step("make_engine", (seed,), {"eos_token_id": end}, save_as="ended", send_back=False),
            Step("generate_rollouts", (Saved("engine"), prompts, *args)),
            Step("generate_rollouts", (Saved("engine"), prompts[1:], *args, 1)),
            Step("generate_rollouts", (Saved("narrow"), prompts, *args)),
            Step("generate_rollouts", (Saved("ended"), prompts, *args)),
        ]
        got = submission.script(steps).steps[0][3:]
        where = f"generate_rollouts(engine, prompts (3, 4), group_size={GROUP}, max_new_tokens={NEW}, temperature=1.3)"
        return got, {"whole": whole, "ended": ended, "end": end, "where": where}

    return cached((id(submission), "rollouts"), make)


def check_rollouts(got: dict, expected: dict, rows: slice, where: str) -> None:
    assert isinstance(got, dict), f"{where} returned {type(got).__name__}, expected a dict"
    for key in ("prompt_ids", "completion_ids", "completion_mask", "logprobs"):
        assert key in got, f"{where}: the result has no key {key!r} (keys: {sorted(got)})"
    for key in ("prompt_ids", "completion_ids", "completion_mask"):
        assert_matches(
            got[key],
            expected[key][rows],
            f"{where}: {key!r} (rows prompt-major; completion g of prompts[i] samples with seed "
            f"seed * 1_000_003 + (first_prompt + i) * group_size + g)",
        )
    assert_matches(got["logprobs"], expected["logprobs"][rows], f"{where}: 'logprobs' (temperature 1)", *TOL)
    assert got.get("group_size") == GROUP, f"{where}: 'group_size' is {got.get('group_size')!r}, expected {GROUP}"


@pytest.mark.points(3)
def test_rollouts_equal_the_reference_sampler(submission):
    got, ref = rollout_case(submission)
    check_rollouts(got[0], ref["whole"], slice(None), ref["where"])


@pytest.mark.points(3)
def test_rollouts_do_not_depend_on_the_share_or_the_batching(submission):
    got, ref = rollout_case(submission)
    check_rollouts(got[1], ref["whole"], slice(GROUP, None), ref["where"] + " on prompts[1:] with first_prompt=1")
    check_rollouts(got[2], ref["whole"], slice(None), ref["where"] + " on an engine of max_batch=2")


@pytest.mark.points(2)
def test_rollouts_pad_and_mask_after_the_end_token(submission):
    got, ref = rollout_case(submission)
    lengths = ref["ended"]["completion_mask"].sum(1)
    assert int((lengths < NEW).sum()) > 0  # the reference's own premise: some completions end early
    where = ref["where"] + f" on an engine whose eos_token_id={ref['end']}"
    check_rollouts(got[3], ref["ended"], slice(None), where + " (pad with it after it, mask 0 and logprob 0 there)")


# ---------------------------------------------------------------------------- the step on ranks


def world_run(submission, placement, off_policy: bool, steps: int, normalisation: str) -> tuple[list, dict]:
    """run_grpo on a world of 4 and the reference's train, once per submission and case."""
    stubs_first(submission, "generate_rollouts", "grpo_step", "train_grpo")

    def make():
        seed = seed_of("world", off_policy)
        trainer_ranks, engine_ranks, tp = placement
        args = (seed, trainer_ranks, engine_ranks, tp, steps, PROMPTS, GROUP, NEW)
        kwargs = {"off_policy": off_policy, "normalisation": normalisation}
        got = [rank[0] for rank in submission.script_spmd(4, [[Step("run_grpo", args, kwargs)]] * 4).steps]
        expected = R.train(seed, steps, PROMPTS, GROUP, NEW, off_policy=off_policy, normalisation=normalisation)
        return got, expected | {"seed": seed}

    key = (id(submission), repr(placement), off_policy, steps, normalisation)
    return cached(key, make)


def check_world(got: list, expected: dict, placement, where: str) -> None:
    trainer_ranks = placement[0]
    for rank, result in enumerate(got):
        metrics = result["metrics"]
        assert len(metrics) == len(expected["metrics"]), (
            f"{where}: rank {rank} returned {len(metrics)} steps' metrics, expected {len(expected['metrics'])}"
        )
        for step, (mine, theirs) in enumerate(zip(metrics, expected["metrics"])):
            frozen = (
                ""
                if not (mine.get("kl") == 0 and theirs["kl"] > 0)
                else (
                    ": a KL of exactly 0 after an update means the reference moved with the policy; it must stay "
                    "the initial model (worker.trainer.reference)"
                )
            )
            for key, value in theirs.items():
                assert key in mine, f"{where}: rank {rank}, step {step}: no metric {key!r}"
                assert abs(mine[key] - value) <= 1e-9 + 1e-9 * abs(value), (
                    f"{where}: rank {rank}, step {step}: {key} = {mine[key]!r}, expected {value!r} (the "
                    f"whole batch's value, the same on every rank, from before the update){frozen}"
                )
    weights = rebuild([got[r]["chunks"] for r in trainer_ranks], where)
    for name, value in expected["weights"].items():
        assert_matches(weights[name], value, f"{where}: {name} rebuilt from the trainer's chunks", *TOL)


@pytest.mark.points(4)
def test_colocated_step_on_four_ranks_matches_one_process(submission):
    got, expected = world_run(submission, COLOCATED, False, 2, "sequence")
    check_world(got, expected, COLOCATED, "colocated (trainer and engine on ranks 0-3, tp 2), 2 steps")


@pytest.mark.points(4)
def test_disaggregated_step_gives_the_colocated_weights(submission):
    got, expected = world_run(submission, DISAGGREGATED, False, 2, "sequence")
    check_world(got, expected, DISAGGREGATED, "disaggregated (trainer ranks [3, 1], engine [2, 0], tp 2), 2 steps")


@pytest.mark.points(3)
@pytest.mark.parametrize("placement", [COLOCATED, DISAGGREGATED], ids=["colocated", "disaggregated"])
def test_engine_holds_the_updated_weights_in_tp_layout(submission, placement):
    got, expected = world_run(submission, placement, False, 2, "sequence")
    _, engine_ranks, tp = placement
    for k, rank in enumerate(engine_ranks):
        engine = got[rank]["engine"]
        assert engine is not None, f"rank {rank} is engine rank {k} but returned no engine weights"
        for name, value in expected["weights"].items():
            assert_matches(
                engine[name],
                tp_slice(name, value, k % tp, tp),
                f"placement {placement}: engine rank {rank} (tp rank {k % tp}): {name} after the last step "
                f"(sync_weights' result loaded with engine.load_weights)",
                *TOL,
            )


@pytest.mark.points(3)
def test_step_masks_the_prompt_and_the_padding(submission):
    """One step in one process on a batch where most completions ended early (padding after the
    end token, and padded positions whose ids would score)."""
    stubs_first(submission, "grpo_step")

    def make():
        seed = seed_of("mask")
        model = R.initial_model(seed)
        prompts = R.prompts_of(seed, 0, 2)
        batch = R.rollouts(model, prompts, 4, NEW, 1.5, seed)
        counts = torch.bincount(batch["completion_ids"].reshape(-1), minlength=R.CONFIG.vocab_size)
        batch = R.rollouts(model, prompts, 4, NEW, 1.5, seed, end=int(counts.argmax()))
        batch = batch | {"group_size": 4}
        steps = [
            Step("make_worker", (seed, [0], [0], 1), save_as="worker", send_back=False),
            Step("grpo_step", (Saved("worker"), batch)),
            Step("worker.state"),
        ]
        got = submission.script(steps).steps[0][1:]
        policy, reference = R.initial_model(seed).requires_grad_(True), R.initial_model(seed)
        metrics = R.update(policy, reference, R.Adam(policy.parameters(), 1e-2), batch, 4, 0.2, 0.04, "sequence")
        return got, metrics, dict(policy.named_parameters()), batch

    got, metrics, weights, batch = cached((id(submission), "mask"), make)
    ended = int((batch["completion_mask"].sum(1) < NEW).sum())
    where = f"grpo_step in one process on 8 completions of which {ended} end early"
    hint = (
        "only completion tokens count (the logits at positions P - 1 .. P + T - 2 predict them), padding after "
        "the end token does not"
    )
    for key, value in metrics.items():
        assert abs(got[0][key] - value) <= 1e-9 + 1e-9 * abs(value), (
            f"{where}: {key} = {got[0][key]!r}, expected {value!r}: {hint}"
        )
    rebuilt = rebuild([got[1]["chunks"]], where)
    for name, value in weights.items():
        assert_matches(rebuilt[name], value.detach(), f"{where}: {name} after the step ({hint})", *TOL)


# ---------------------------------------------------------------------------- off-policy


@pytest.mark.points(4)
def test_off_policy_loop_trains_the_previous_steps_rollouts(submission):
    got, expected = world_run(submission, OFF_POLICY, True, 3, "token")
    where = "train_grpo(off_policy=True) on trainer ranks [1, 2, 3, 0], engine [3, 2] (tp 2), 'token', 3 steps"
    try:
        check_world(got, expected, OFF_POLICY, where)
    except AssertionError:
        seed, mine = expected["seed"], got[OFF_POLICY[0][0]]["metrics"]
        for variant, mistake in (
            (
                "regenerate",
                "it samples every batch with the current weights (on-policy): batch k + 1 must be "
                "generated before step k trains, with the weights step k starts from",
            ),
            (
                "current_old",
                "its old_logprobs are the trained policy's: take the engine's log-probabilities "
                "from generation time (rollouts['logprobs']), which the importance ratio compares with",
            ),
        ):
            wrong = R.train(seed, 3, PROMPTS, GROUP, NEW, off_policy=True, normalisation="token", variant=variant)
            if all(
                abs(a["loss"] - b["loss"]) < 1e-9 and abs(a["kl"] - b["kl"]) < 1e-9
                for a, b in zip(mine, wrong["metrics"])
            ):
                raise AssertionError(f"{where}: the loop matches a wrong one: {mistake}") from None
        raise


@pytest.mark.points(3)
def test_mean_reward_rises_on_the_toy_task(submission):
    stubs_first(submission, "generate_rollouts", "grpo_step", "train_grpo")
    got = submission.function("run_grpo")(REWARD_SEED, [0], [0], 1, REWARD_STEPS, 4, 4, 8)
    rewards = [m["mean_reward"] for m in got["metrics"]]
    expected = [m["mean_reward"] for m in R.train(REWARD_SEED, REWARD_STEPS, 4, 4, 8)["metrics"]]
    where = f"run_grpo(seed={REWARD_SEED}, one process, {REWARD_STEPS} steps of 4 prompts x 4 completions of 8 tokens)"
    assert len(rewards) == REWARD_STEPS, f"{where}: {len(rewards)} steps' metrics, expected {REWARD_STEPS}"
    shown = ", ".join(f"{r:.3f}" for r in rewards)
    assert rewards[-1] >= rewards[0] + 0.3 and sum(rewards[-2:]) / 2 >= sum(rewards[:2]) / 2 + 0.2, (
        f"{where}: the mean reward per step is {shown}; the reference's rises "
        f"({', '.join(f'{r:.3f}' for r in expected)}): the last step at least 0.3 above the first and the mean "
        f"of the last two at least 0.2 above that of the first two. A flat or falling curve: check the sign of "
        f"the loss and of the advantages"
    )
    for step, (a, b) in enumerate(zip(rewards, expected)):
        assert abs(a - b) < 1e-9, f"{where}: step {step}'s mean reward {a!r}, the reference's {b!r}"


# ---------------------------------------------------------------------------- errors


BAD_ROLLOUTS = {
    "group_size=0": ((torch.tensor([[5, 6, 7, 8]]), 0, 4, 1.0, 0), "group_size < 1"),
    "prompts 1-D": ((torch.tensor([5, 6, 7, 8]), 2, 4, 1.0, 0), "prompts not 2-D"),
    "no prompt": ((torch.zeros(0, 4, dtype=torch.long), 2, 4, 1.0, 0), "no prompt"),
    "first_prompt=-1": ((torch.tensor([[5, 6, 7, 8]]), 2, 4, 1.0, 0, -1), "first_prompt < 0"),
}


@pytest.mark.points(1)
@pytest.mark.parametrize("case", list(BAD_ROLLOUTS))
def test_generate_rollouts_raises_value_error(submission, case):
    args, _ = BAD_ROLLOUTS[case]
    steps = [
        Step("make_engine", (1,), save_as="engine", send_back=False),
        Step("generate_rollouts", (Saved("engine"), *args)),
    ]
    expect_exception("ValueError", lambda: submission.script(steps))


@pytest.mark.points(1)
def test_grpo_step_raises_when_prompts_do_not_split_over_trainers(submission):
    """2 prompts (one engine replica on ranks [0, 1]) and 4 trainer ranks."""
    stubs_first(submission, "generate_rollouts", "grpo_step")
    steps = [
        Step("make_worker", (1, [0, 1, 2, 3], [0, 1], 2), save_as="worker", send_back=False),
        Step(
            "gather_rollouts", (Saved("worker"), R.prompts_of(1, 0, 2), 2, 3, 1.0, 0), save_as="batch", send_back=False
        ),
        Step("grpo_step", (Saved("worker"), Saved("batch"))),
    ]
    expect_exception("ValueError", lambda: submission.script_spmd(4, [steps] * 4))


@pytest.mark.points(1)
def test_train_grpo_raises_for_fewer_than_one_step(submission):
    steps = [
        Step("make_worker", (1, [0], [0], 1), save_as="worker", send_back=False),
        Step("train_grpo", (Saved("worker"), 0, 2, 2, 3)),
    ]
    expect_exception("ValueError", lambda: submission.script(steps))
