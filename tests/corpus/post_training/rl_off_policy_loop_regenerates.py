"""train_grpo ignores off_policy: every step samples its batch with the current weights, so the
"off-policy" loop is on-policy and trains nothing stale."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: rl.py
# select: off_policy_loop or mean_reward_rises
# fails: test_off_policy_loop_trains_the_previous_steps_rollouts
# kind:
# message: samples every batch with the current weights


def train_grpo(
    worker,
    steps,
    num_prompts,
    group_size,
    max_new_tokens,
    temperature=1.0,
    seed=0,
    off_policy=False,
    epsilon=0.2,
    beta=0.04,
    normalisation="sequence",
):
    if steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps}")
    metrics = []
    for k in range(steps):
        rollouts = gather_rollouts(
            worker, toy_prompts(seed, k, num_prompts), group_size, max_new_tokens, temperature, seed + k
        )
        metrics.append(grpo_step(worker, rollouts, epsilon, beta, normalisation))
    return metrics
