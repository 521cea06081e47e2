"""run_schedule that posts every send and returns without waiting on any of them: gloo delivers the messages anyway on this machine, so the gradients are right and nothing hangs, but a tensor whose send was never waited on may still be read after the rank moved on, and the docstring says to wait on all of them."""

# ruff: noqa: E501, F821 - a fragment appended to a solution file, whose names are in scope
# target: runtime.py
# select: waits_on_every_send
# fails: test_run_schedule_waits_on_every_send_before_returning
# kind:
# message: GPipe on 2 ranks, m=2, one-tensor stages, float64: run_schedule returned with \[6, 6\] \(per rank\) of send_tensors' requests never waited on


def _forget_the_sends(self):
    self.sends.clear()


_StageRunner.finish = _forget_the_sends
