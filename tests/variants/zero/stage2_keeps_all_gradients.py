"""ZeRO stage 2 that all-reduces and keeps every gradient, as stage 1 does: the optimizer state is
sharded and training is correct, but every rank still holds all the gradients."""
# target: sharded.py


class ShardedOptimizer(ShardedOptimizer):
    def __init__(self, params, optimizer_cls, stage=1, **kwargs):
        super().__init__(params, optimizer_cls, stage, **kwargs)
        self.stage = 1
