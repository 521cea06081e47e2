"""A sequence-parallel column layer that lets autograd keep its all-gathered input (F.linear on
gather_from_sequence_parallel_region's output): the block's results are right, but each column
layer saves the whole (s, b, h) input for backward instead of its (s/p, b, h) chunk, p times the
bytes, and its backward makes one all-gather fewer than Megatron-Core's."""
# target: layers.py


def forward(self, x):
    if not self.sequence_parallel:
        return _column_forward(self, x)
    y = F.linear(gather_from_sequence_parallel_region(x, self.group), self.weight, self.bias)
    return _GatherLastDim.apply(y, self.group) if self.gather_output else y


_column_forward = ColumnParallelLinear.forward
ColumnParallelLinear.forward = forward
