"""router_z_loss prints gigabytes of text."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: routing.py
# select: router_z_loss or expert_capacity_is
# fails: router_z_loss
# kind: crash
# message: wrote more than \d+ MiB

import sys


def router_z_loss(router_logits):
    line = "spam " * 200_000 + "\n"
    for _ in range(4096):
        sys.stdout.write(line)
    return torch.zeros(())
