"""load_balancing_loss is right, but starts child processes (one in a session of its own) that outlive the call."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: routing.py
# select: load_balancing_loss_matches
# fails: -
# kind:
# message:

import subprocess

_correct_load_balancing_loss = load_balancing_loss


def load_balancing_loss(router_logits, expert_ids, num_experts):
    subprocess.Popen(["sleep", "600"])
    subprocess.Popen(["sleep", "600"], start_new_session=True)
    return _correct_load_balancing_loss(router_logits, expert_ids, num_experts)
