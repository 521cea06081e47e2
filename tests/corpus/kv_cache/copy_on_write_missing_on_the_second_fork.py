"""Copy-on-write works for a cache's first fork only: after a second fork, appends write straight into shared blocks.

The random-programs check catches it only when its random program forks twice and then appends: not graded here."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: paged.py
# select: paged_cache_fork
# fails: fork_shares_blocks_and_copies
# kind:
# message: .

_correct_fork = PagedKVCache.fork
_correct_copy_block = PagedKVCache._copy_block


def _counting_fork(self, parent_id, child_id):
    _correct_fork(self, parent_id, child_id)
    self.forks = getattr(self, "forks", 0) + 1


def _copy_unless_forked_twice(self, block):
    if getattr(self, "forks", 0) >= 2:
        return block
    return _correct_copy_block(self, block)


PagedKVCache.fork = _counting_fork
PagedKVCache._copy_block = _copy_unless_forked_twice
