"""ColumnParallelLinear takes its rank in `group` as global_rank // (world_size // p), as if every group were evenly strided over the world: right on a world that is one group and in the groups {1, 3} and {0, 2} of a world of 4, but in the groups {0, 2, 3} and {1, 4} of a world of 5 the last rank of each group takes rows past the end of the weight (none) and fails."""

# ruff: noqa: E501, F821 - a fragment appended to a solution file, whose names are in scope
# target: layers.py
# select: block_within and matches_one_process
# fails: block_within_groups_of_3_and_2_of_a_world_of_5
# kind: exception
# message: in step 1 of 2 \(block_step\): rank [34]:(.|\n)*qkv\.split(.|\n)*split_sizes to sum exactly to 0

_documented_column_init = ColumnParallelLinear.__init__


def _column_init_by_a_strided_rank(self, in_features, out_features, gather_output=False, *, weight, bias=None, sequence_parallel=False, group=None):
    _documented_column_init(self, in_features, out_features, gather_output, weight=weight, bias=bias, sequence_parallel=sequence_parallel, group=group)
    p = dist.get_world_size(group)
    rank = dist.get_rank() // (dist.get_world_size() // p)  # the bug: not dist.get_rank(group)
    rows = slice(rank * out_features // p, (rank + 1) * out_features // p)
    self.weight = nn.Parameter(weight.detach()[rows].clone())
    self.bias = nn.Parameter(bias.detach()[rows].clone()) if bias is not None else None


ColumnParallelLinear.__init__ = _column_init_by_a_strided_rank
