"""Public tests for the kv_cache module: run them while you work with

    pytest assignments/kv_cache             (add -s to see what your code prints)
    pytest assignments/kv_cache -k paged

Your code runs in a worker process, never inside pytest; the references here use the given
TinyGPT (grader/models/tiny_gpt.py) without a cache. The hidden suite checks more: published
model sizes, sampling, ragged batches, random programs of paged-cache operations compared with a
dictionary model, the FLOPs of a decode step and the speed-up; `make grade` gives the score.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from grader.models.tiny_gpt import TinyGPT, TinyGPTConfig
from grader.sandbox import Saved, Step
from grader.testing import assert_matches, expect_exception, generator

CONFIG = {"vocab_size": 97, "max_seq_len": 1024, "num_layers": 2, "d_model": 64, "num_heads": 4, "num_kv_heads": 2}


def test_kv_cache_bytes_of_llama_2_7b_is_512_kib_per_token(submission):
    # 2 (K and V) x 32 layers x 32 heads x 128 dims x 2 bytes (float16)
    assert submission.function("kv_cache_bytes")(32, 32, 128, 1, 1, torch.float16) == 512 * 1024


def test_kv_cache_update_appends_and_returns_everything_so_far(submission):
    k1, v1 = torch.randn(1, 2, 3, 8), torch.randn(1, 2, 3, 8)
    k2, v2 = torch.randn(1, 2, 1, 8), torch.randn(1, 2, 1, 8)
    steps = [
        Step("KVCache", (1, 1, 8, 2, 8), save_as="cache", send_back=False),  # one layer
        Step("cache.update", (0, k1, v1)),
        Step("cache.update", (0, k2, v2)),
    ]
    _, first, second = submission.script(steps).steps[0]
    assert_matches(first[0], k1, "keys after the first update")
    assert_matches(second[0], torch.cat([k1, k2], 2), "keys after the second update")
    assert_matches(second[1], torch.cat([v1, v2], 2), "values after the second update")


def test_kv_cache_refuses_more_than_max_seq_len(submission):
    k = torch.randn(1, 2, 5, 8)
    steps = [Step("KVCache", (1, 1, 8, 2, 8), save_as="cache", send_back=False)]
    steps += [Step("cache.update", (0, k, k)), Step("cache.update", (0, k, k))]
    expect_exception("ValueError", lambda: submission.script(steps))


def test_cached_greedy_generation_equals_recomputing_the_sequence(submission):
    prompt = torch.randint(0, 97, (2, 7), generator=generator("public-prompt"))
    steps = [
        Step("build_model", (CONFIG, 0, "float64"), save_as="model", send_back=False),
        Step("generate", (Saved("model"), prompt, 6)),
    ]
    tokens, logits = submission.script(steps).steps[0][1]
    model = TinyGPT.from_seed(TinyGPTConfig(**CONFIG), 0, torch.float64)
    ids = prompt
    with torch.no_grad():
        for step in range(6):
            last = model(ids)[:, -1]  # the whole sequence, no cache
            assert_matches(logits[:, step], last, f"logits of step {step}", 1e-9, 1e-9)
            ids = torch.cat([ids, last.argmax(-1, keepdim=True)], 1)
    assert_matches(tokens, ids[:, 7:], "generated tokens")


def test_paged_cache_fork_shares_blocks_until_a_write(submission):
    k, v = torch.randn(6, 2, 4), torch.randn(6, 2, 4)
    one_k, one_v = torch.randn(1, 2, 4), torch.randn(1, 2, 4)
    steps = [
        Step("PagedKVCache", (8, 4, 1, 2, 4), save_as="cache", send_back=False),  # 8 blocks of 4
        Step("cache.add_sequence", (0,)),
        Step("cache.append", (0, 0, k, v)),  # 6 positions: blocks [a, b], b partly filled
        Step("cache.fork", (0, 1)),
        Step("cache.block_table", (1,)),
        Step("cache.num_free_blocks"),
        Step("cache.append", (1, 0, one_k, one_v)),  # copy-on-write of b for sequence 1
        Step("cache.block_table", (0,)),
        Step("cache.block_table", (1,)),
        Step("cache.num_free_blocks"),
        Step("cache.gather", (0, 0)),
        Step("cache.gather", (1, 0)),
    ]
    r = submission.script(steps).steps[0]
    assert len(r[4]) == 2 and r[5] == 6, (
        f"after fork: child table {r[4]}, free {r[5]} (expected 2 shared blocks, 6 free)"
    )
    parent, child = r[7], r[8]
    assert parent[0] == child[0] and parent[1] != child[1], f"parent {parent}, child {child}: only b is copied"
    assert r[9] == 5, f"one block was copied: 5 free, got {r[9]}"
    assert_matches(r[10][0], k, "the parent's keys are unchanged by the child's append")
    assert_matches(r[11][0], torch.cat([k, one_k]), "the child's keys")


def test_paged_decode_attention_equals_sdpa(submission):
    k, v = torch.randn(5, 2, 4), torch.randn(5, 2, 4)
    q = torch.randn(1, 4, 4)
    steps = [
        Step("PagedKVCache", (4, 4, 1, 2, 4), save_as="cache", send_back=False),
        Step("cache.add_sequence", (7,)),
        Step("cache.append", (7, 0, k, v)),
        Step("paged_decode_attention", (q, Saved("cache"), [7], 0)),
    ]
    out = submission.script(steps).steps[0][-1]
    expected = F.scaled_dot_product_attention(q[0][:, None], k.transpose(0, 1), v.transpose(0, 1), enable_gqa=True)
    what = "paged_decode_attention of sequence 7 (5 cached positions: one full block of 4 and 1 in the next)"
    assert_matches(out, expected[:, 0][None], f"{what} vs F.scaled_dot_product_attention", 1e-5, 1e-5)


def test_paged_cache_free_returns_a_block_once_no_sequence_uses_it(submission):
    k, v = torch.randn(6, 2, 4), torch.randn(6, 2, 4)
    steps = [
        Step("PagedKVCache", (4, 4, 1, 2, 4), save_as="cache", send_back=False),  # 4 blocks of 4
        Step("cache.add_sequence", (0,)),
        Step("cache.append", (0, 0, k, v)),  # 6 positions: 2 blocks
        Step("cache.fork", (0, 1)),  # sequence 1 shares both
        Step("cache.free", (0,)),
        Step("cache.num_free_blocks"),
        Step("cache.gather", (1, 0)),
        Step("cache.free", (1,)),
        Step("cache.num_free_blocks"),
        Step("cache.add_sequence", (2,)),
        Step("cache.append", (2, 0, torch.randn(16, 2, 4), torch.randn(16, 2, 4))),  # all 4 blocks
        Step("cache.num_free_blocks"),
    ]
    r = submission.script(steps).steps[0]
    assert r[5] == 2, f"freeing sequence 0 while its fork 1 still uses both blocks: expected 2 free, got {r[5]}"
    assert_matches(r[6][0], k, "keys of the fork after its parent was freed (its blocks must stay intact)")
    assert r[8] == 4, f"after freeing the last sequence using them, expected all 4 blocks free, got {r[8]}"
    assert r[11] == 0, f"a new sequence of 16 positions should reuse the 4 freed blocks: expected 0 free, got {r[11]}"
