"""Prefix caching keys a block by its own tokens only, not by the blocks before it: a block
whose tokens recur after another prefix is reused with keys and values computed in the wrong
context.

The tokens can stay right (a random TinyGPT often repeats one token): the logits the model returned
are compared with one request alone too, and the random workloads hold a block that recurs after
different prefixes, so it costs the random-workloads check as well."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: scheduler.py
# select: same_prefix or random_workloads
# fails: same_prefix|random_workloads
# kind:
# message: one request alone generates|follows the same prefix as in request 0|differ from one request alone


def _own_tokens_keys(tokens, block_size, count):
    for i in range(count):
        yield tuple(tokens[i * block_size : (i + 1) * block_size])  # the bug: no key of the block before


_PrefixCache.keys = staticmethod(_own_tokens_keys)
