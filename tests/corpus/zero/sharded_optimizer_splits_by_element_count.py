"""ShardedOptimizer that balances parameters by element count, not bytes: the same split whenever every parameter has one dtype, but 60 float64, 100 float32 and 200 float16 elements (480, 400 and 400 bytes) put the float16 one, not the float64 one, on rank 0."""

# ruff: noqa: E501, F821 - a fragment appended to a solution file, whose names are in scope
# target: sharded.py
# select: mixed_dtypes or (training_matches_one_process and adamw and stage1)
# fails: test_sharded_optimizer_splits_parameters_of_mixed_dtypes_by_bytes
# kind:
# message: rank 0's inner optimizer holds the \[torch\.float16\] ones, partition_by_bytes gives it the \[torch\.float64\] ones: pass each parameter's size in bytes


def _split_by_elements(self, params, optimizer_cls, stage=1, group=None, **kwargs):
    if stage not in (1, 2):
        raise ValueError(f"stage must be 1 or 2, not {stage}")
    self.group, self.params, self.stage = group, list(params), stage
    self.rank, self.world_size = dist.get_rank(group), dist.get_world_size(group)
    self.owners = partition_by_bytes([p.numel() for p in self.params], self.world_size)
    mine = [p for p, owner in zip(self.params, self.owners) if owner == self.rank]
    self.optimizer = optimizer_cls(mine, **kwargs)


ShardedOptimizer.__init__ = _split_by_elements
