"""grpo_step takes the reference log-probabilities from the policy being trained instead of the
frozen initial model: the KL term is 0 at every step and the policy drifts freely."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: rl.py
# select: colocated_step or step_masks
# fails: test_colocated_step_on_four_ranks_matches_one_process
# kind:
# message: the reference moved with the policy


def grpo_step(
    worker: RLWorker,
    rollouts: dict,
    epsilon: float = 0.2,
    beta: float = 0.04,
    normalisation: str = "sequence",
) -> dict[str, float]:
    group_size = rollouts["group_size"]
    rows = rollouts["completion_ids"].shape[0]
    n, trainers = rows // group_size, len(worker.trainer_ranks)
    if n % trainers:
        raise ValueError(f"{n} prompts cannot be split evenly over {trainers} trainer ranks")
    mask = rollouts["completion_mask"]
    rewards = toy_reward(rollouts["prompt_ids"], rollouts["completion_ids"], mask)
    total_tokens = int(mask.sum())
    # This rank's part of the batch's loss and of its k3 sum, summed over the world below.
    partial = torch.zeros(2, dtype=torch.float64)
    if worker.trainer is not None:
        t = worker.trainer_ranks.index(worker.rank)
        mine = slice(t * rows // trainers, (t + 1) * rows // trainers)
        prompt_ids, completion_ids, my_mask = (
            rollouts["prompt_ids"][mine],
            rollouts["completion_ids"][mine],
            mask[mine],
        )
        advantages = group_advantages(rewards[mine], group_size)
        sequences = torch.cat([prompt_ids, completion_ids], dim=1)
        first = prompt_ids.shape[1] - 1
        model = worker.trainer.gather()
        logprobs = completion_logprobs(model(sequences)[:, first:-1], completion_ids)
        with torch.no_grad():
            reference = completion_logprobs(model(sequences)[:, first:-1], completion_ids)  # the policy itself
        old = rollouts["logprobs"][mine].to(logprobs.dtype)
        loss = grpo_loss(logprobs, old, reference, advantages, my_mask, epsilon, beta, normalisation)
        if normalisation == "token":
            loss = loss * int(my_mask.sum()) * trainers / total_tokens
        loss.backward()
        worker.trainer.step(model)
        gap = (reference - logprobs.detach()).double()
        k3 = (torch.exp(gap) - gap - 1) * my_mask
        partial = torch.stack([loss.detach().double() / trainers, k3.sum()])
    if worker.world_size > 1:
        dist.all_reduce(partial)
    chunks = worker.trainer.chunks() if worker.trainer is not None else None
    weights = sync_weights(chunks, worker.config, worker.trainer_ranks, worker.engine_ranks, worker.tp)
    if worker.engine is not None:
        worker.engine.load_weights(weights)
    return {
        "mean_reward": float(rewards.mean()),
        "kl": float(partial[1]) / total_tokens,
        "loss": float(partial[0]),
    }
