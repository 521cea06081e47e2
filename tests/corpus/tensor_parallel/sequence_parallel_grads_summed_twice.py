"""With sequence parallelism the block all-reduces the gradients of its whole parameters
(LayerNorms, the row layers' biases) in backward, so every rank holds their sum: the docstring
says each rank's gradient covers its own positions, and the sum over ranks is then p times too
large."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: layers.py
# select: parallel_block_matches_one_process and sp
# fails: parallel_block_matches_one_process
# kind:
# message: gradient of ln1\.(weight|bias)

_Documented = ParallelBlock


def _summed_over_ranks(grad):
    grad = grad.clone()
    dist.all_reduce(grad)
    return grad


class ParallelBlock(_Documented):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.attention.qkv.sequence_parallel:
            whole = (*self.ln1.parameters(), *self.ln2.parameters(), self.attention.proj.bias, self.mlp.fc2.bias)
            for parameter in whole:
                parameter.register_hook(_summed_over_ranks)
