"""Full optimizer state on every rank, hidden by rewriting the given counters to report 0 bytes.

The course's given code replaces the student's copy of state_bytes and train_sharded, so the real
bytes are counted."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: sharded.py
# select: stage_1_matches_torch_zero_redundancy_optimizer
# fails: stage_1_matches_torch_zero_redundancy_optimizer
# kind:
# message: rank \d holds \d+ bytes of optimizer state


class ShardedOptimizer(ShardedOptimizer):
    def __init__(self, params, optimizer_cls, stage=1, group=None, **kwargs):
        self.params, self.stage = list(params), stage
        self.optimizer = optimizer_cls(self.params, **kwargs)

    @torch.no_grad()
    def step(self):
        for p in self.params:
            dist.all_reduce(p.grad)
            p.grad /= dist.get_world_size()
        self.optimizer.step()


def state_bytes(optimizer):
    return 0


_given_train_sharded = train_sharded


def train_sharded(*args, **kwargs):
    return {**_given_train_sharded(*args, **kwargs), "state_bytes": 0}
