"""VocabParallelEmbedding takes its rows by the global rank (dist.get_rank()) instead of its rank
in `group`: right on a world that is one group, but in a group of ranks {1, 3} rank 3 takes rows
past the end of the vocabulary."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: vocab.py
# select: within_two_groups
# fails: vocab_embedding_and_loss_within_two_groups
# kind:
# message: VocabParallelEmbedding, the instance on ranks .*output \(F\.embedding on the whole table\)

_documented_init = VocabParallelEmbedding.__init__


def _init_by_the_global_rank(self, num_embeddings, embedding_dim, *, weight, group=None):
    _documented_init(self, num_embeddings, embedding_dim, weight=weight, group=group)
    self.start = dist.get_rank() * self.per_rank  # the bug: the world's rank, not the group's


VocabParallelEmbedding.__init__ = _init_by_the_global_rank
