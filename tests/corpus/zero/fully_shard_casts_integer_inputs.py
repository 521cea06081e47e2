"""fully_shard that casts every tensor input to compute_dtype, token ids included: right for the MLP (float inputs only), but an Embedding fed int64 ids under compute_dtype=bfloat16 gets bfloat16 "ids" and refuses them."""

# ruff: noqa: E501, F821 - a fragment appended to a solution file, whose names are in scope
# target: fsdp.py
# select: integer_inputs or (mixed_precision_matches_one_process and bf16)
# fails: test_fully_shard_leaves_integer_inputs_uncast
# kind: exception
# message: (?i)indices


def _cast_every_tensor(self, value):
    if self.compute_dtype is not None and isinstance(value, torch.Tensor):
        return value.to(self.compute_dtype)
    return value


_ShardedLayer.cast = _cast_every_tensor
