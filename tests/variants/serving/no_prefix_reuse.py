"""Wasteful: no prefix reuse. Full blocks are cached but a new request never adopts them, so
every prompt is computed in full."""
# target: scheduler.py


def _no_match(self, tokens, block_size):
    return []


_PrefixCache.match = _no_match
