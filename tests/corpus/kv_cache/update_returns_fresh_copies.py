"""KVCache.update returns copies of the filled part instead of views of the preallocated buffers:
right values, but every decode step allocates the whole cache again."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: cache.py
# select: kv_cache_update or allocated_once
# fails: allocated_once
# kind:
# message: allocate them in __init__ and return views

_viewing_update = KVCache.update


def _copying_update(self, layer, k, v):
    keys, values = _viewing_update(self, layer, k, v)
    return keys.clone(), values.clone()  # the bug


KVCache.update = _copying_update
