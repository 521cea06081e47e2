"""cache_bytes_per_token starts a thread that keeps running after it returns."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: mla.py
# select: cache_bytes_per_token_matches and (mha or mla)
# fails: cache_bytes_per_token
# kind: thread
# message: cache_bytes_per_token returned but left a thread running

import threading
import time

_correct_cache_bytes_per_token = cache_bytes_per_token


def _busy():
    while True:
        time.sleep(0.01)


def cache_bytes_per_token(
    variant, n_layers, n_heads, head_dim, n_kv_heads=None, kv_latent_dim=None, bytes_per_element=2
):
    threading.Thread(target=_busy, daemon=True).start()
    return _correct_cache_bytes_per_token(
        variant, n_layers, n_heads, head_dim, n_kv_heads, kv_latent_dim, bytes_per_element
    )
