"""kv_cache_bytes is right, but leaves 2000 files in its working folder on every call."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: cache.py
# select: kv_cache_bytes_matches
# fails: -
# kind:
# message:
# time-limit: 20

import os
import uuid

_correct_kv_cache_bytes = kv_cache_bytes


def kv_cache_bytes(num_layers, num_kv_heads, head_dim, seq_len, batch, dtype):
    folder = f"junk-{uuid.uuid4().hex}"
    os.mkdir(folder)
    for i in range(2000):
        with open(os.path.join(folder, f"{i}.txt"), "w") as file:
            file.write("junk")
    return _correct_kv_cache_bytes(num_layers, num_kv_heads, head_dim, seq_len, batch, dtype)
