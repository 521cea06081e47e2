"""A "sharded" optimizer that is not: every rank builds the optimizer over all parameters and
steps all of them on averaged gradients. Correct training, but the full optimizer state is
replicated on every rank."""
# target: sharded.py


class ShardedOptimizer(ShardedOptimizer):
    def __init__(self, params, optimizer_cls, stage=1, group=None, **kwargs):
        if stage not in (1, 2):
            raise ValueError(f"stage must be 1 or 2, not {stage}")
        self.params, self.stage = list(params), stage
        self.optimizer = optimizer_cls(self.params, **kwargs)

    @torch.no_grad()
    def step(self):
        for p in self.params:
            dist.all_reduce(p.grad)
            p.grad /= dist.get_world_size()
        self.optimizer.step()
