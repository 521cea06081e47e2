"""ShardedOptimizer checks only `stage > 2`: stage 0 silently trains as stage 1."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: sharded.py
# select: sharded_optimizer_rejects
# fails: sharded_optimizer_rejects_stage_0
# kind:
# message: stage=0\): expected ValueError

_Checked = ShardedOptimizer


class ShardedOptimizer(_Checked):
    def __init__(self, params, optimizer_cls, stage=1, **kwargs):
        super().__init__(params, optimizer_cls, stage=max(stage, 1), **kwargs)
