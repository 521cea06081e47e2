"""Sequence parallelism that gathers the whole sequence before each LayerNorm and keeps its own
chunk of the normalised result: the block's results are right, but the LayerNorms save the whole
sequence for backward (p times the bytes), and each makes an extra all-gather."""
# target: layers.py


def forward(self, x):
    if not self.attention.qkv.sequence_parallel:
        return _block_forward(self, x)
    x = x + self.attention(_own_rows(self.ln1(gather_from_sequence_parallel_region(x, self.mlp.fc1.group))))
    return x + self.mlp(_own_rows(self.ln2(gather_from_sequence_parallel_region(x, self.mlp.fc1.group))))


def _own_rows(whole):
    """This rank's chunk of the sequence; its gradient is zero elsewhere, and the reduce-scatter
    of the gather above sums those zeros with the owner's rows."""
    return whole.chunk(dist.get_world_size())[dist.get_rank()]


_block_forward = ParallelBlock.forward
ParallelBlock.forward = forward
