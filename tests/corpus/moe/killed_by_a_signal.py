"""expert_capacity kills its own worker with SIGKILL."""

# target: routing.py
# select: expert_capacity or router_z_loss_matches
# fails: expert_capacity
# kind: crash
# message: the process was killed by SIGKILL

import os
import signal


def expert_capacity(num_tokens, num_experts, k, capacity_factor):
    os.kill(os.getpid(), signal.SIGKILL)
