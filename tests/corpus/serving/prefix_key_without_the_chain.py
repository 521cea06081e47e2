"""Prefix caching keys a block by its own tokens only, not by the blocks before it: a block
whose tokens recur after another prefix is reused with keys and values computed in the wrong
context."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: scheduler.py
# select: same_prefix
# fails: same_prefix
# kind:
# message: one request alone generates|follows the same prefix as in request 0


def _own_tokens_keys(tokens, block_size, count):
    for i in range(count):
        yield tuple(tokens[i * block_size : (i + 1) * block_size])  # the bug: no key of the block before


_PrefixCache.keys = staticmethod(_own_tokens_keys)
