"""Hidden suite: the promises of the kv_cache docstrings that the other files leave untested
(tests/spec/promises.toml maps every promise to its tests).

- KVCache: seq_len from 0, advanced by the last layer only; keys and values allocated once, in
  two tensors of the docstring's shape, every update returning views of them (the storage
  pointer and size are read in the worker); an overflowing update raises ValueError naming the
  limit and changes nothing (the given call_or_error of paged.py keeps the script going).
- PagedKVCache: each documented error by name (KeyError, ValueError, RuntimeError("out of
  blocks")), each leaving the free count, the block tables and the contents as they were; the
  block pool key_blocks / value_blocks in the docstring's layout, holding what was appended at
  the positions the block table gives.
- paged_decode_attention: the result in q's dtype (against F.scaled_dot_product_attention in
  float64 here), and no loop over the sequences of the batch (operators counted in the worker
  for 2 and 8 sequences).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from grader.sandbox import Saved, Step
from grader.testing import assert_matches, expect_exception, generator

LAYERS, BATCH, MAX_LEN, HEADS, DIM = 2, 1, 7, 2, 4


def _kv(new: int, *salt: object) -> tuple[torch.Tensor, torch.Tensor]:
    gen = generator("kv-promises", new, *salt)
    return torch.randn(BATCH, HEADS, new, DIM, generator=gen), torch.randn(BATCH, HEADS, new, DIM, generator=gen)


def _seq_len() -> Step:
    return Step("cache.__getattribute__", ("seq_len",))


@pytest.mark.points(2)
def test_kv_cache_is_allocated_once_and_updates_return_views(submission):
    """Two layers, max_seq_len 7, float32: the keys returned by two updates of layer 0 are views
    of one storage (same data pointer) of 2 x 1 x 2 x 7 x 4 floats; values live in another of
    the same size. A cache that concatenates or clones returns a new storage every step."""
    first, second = _kv(3, "first"), _kv(1, "second")
    steps = [
        Step("KVCache", (LAYERS, BATCH, MAX_LEN, HEADS, DIM, torch.float32), save_as="cache", send_back=False),
        _seq_len(),
        Step("cache.update", (0, *first), save_as="r0", send_back=False),
        _seq_len(),
        Step("cache.update", (1, *first), send_back=False),
        _seq_len(),
        Step("cache.update", (0, *second), save_as="r1", send_back=False),
    ]
    for name in ("r0", "r1"):
        for index, what in ((0, "k"), (1, "v")):
            steps += [
                Step(f"{name}.__getitem__", (index,), save_as=f"{name}{what}", send_back=False),
                Step(f"{name}{what}.untyped_storage", save_as=f"{name}{what}s", send_back=False),
                Step(f"{name}{what}s.data_ptr"),
                Step(f"{name}{what}s.nbytes"),
                Step(f"{name}{what}.data_ptr"),
            ]
    r = submission.script(steps).steps[0]
    assert r[1] == 0, f"seq_len of a new cache: {r[1]}, expected 0"
    assert r[3] == 0, f"seq_len after layer 0's update of 3 positions (of 2 layers): {r[3]}, expected 0"
    assert r[5] == 3, f"seq_len after the last layer's update of 3 positions: {r[5]}, expected 3"
    k0_storage, k0_bytes, k0_ptr, v0_storage, v0_bytes = r[9], r[10], r[11], r[14], r[15]
    k1_storage, k1_ptr, v1_storage = r[19], r[21], r[24]
    full = LAYERS * BATCH * HEADS * MAX_LEN * DIM * 4
    assert k0_bytes == full and v0_bytes == full, (
        f"the keys and values update returns live in storages of {k0_bytes} and {v0_bytes} bytes; the cache's two "
        f"tensors of shape (num_layers, batch, num_kv_heads, max_seq_len, head_dim) = ({LAYERS}, {BATCH}, {HEADS}, "
        f"{MAX_LEN}, {DIM}) float32 hold {full}: allocate them in __init__ and return views of them"
    )
    assert k0_storage == k1_storage and v0_storage == v1_storage, (
        "two updates of layer 0 returned keys (or values) in different storages: write into the tensors "
        "allocated in __init__ and return views of them (no torch.cat, no clone, no new allocation per step)"
    )
    assert k0_ptr == k1_ptr, "two updates of layer 0 returned keys that start at different places of the cache"
    assert k0_storage != v0_storage, "keys and values must live in two different tensors"


@pytest.mark.points(2)
def test_kv_cache_overflow_changes_nothing(submission):
    """max_seq_len 7 holding 5 positions: an update of 3 more raises ValueError (through the given
    call_or_error) and leaves seq_len and the stored positions as they were; 2 more then fit."""
    five, three, two = _kv(5, "five"), _kv(3, "three"), _kv(2, "two")
    steps = [
        Step("KVCache", (LAYERS, BATCH, MAX_LEN, HEADS, DIM, torch.float32), save_as="cache", send_back=False),
        Step("cache.update", (0, *five), send_back=False),
        Step("cache.update", (1, *five), send_back=False),
        Step("call_or_error", (Saved("cache"), "update", 0, *three)),
        Step("call_or_error", (Saved("cache"), "update", 1, *three)),
        _seq_len(),
        Step("call_or_error", (Saved("cache"), "update", 0, *two)),
        Step("call_or_error", (Saved("cache"), "update", 1, *two)),
        _seq_len(),
    ]
    r = submission.script(steps).steps[0]
    for layer, status in enumerate(r[3:5]):
        assert status == ("error", "ValueError"), (
            f"layer {layer}: an update of 3 positions onto 5 (max_seq_len 7) should raise ValueError, got {status}"
        )
    assert r[5] == 5, f"seq_len after the refused updates: {r[5]}, expected 5 (a refused update changes nothing)"
    for layer, (status, result) in enumerate(r[6:8]):
        what = f"layer {layer}: after a refused update of 3 positions, an update of 2 onto the 5 stored"
        assert status == "ok", f"{what} raised {result}: the refused update must change nothing (seq_len stays 5)"
        expected_k, expected_v = (torch.cat([a, b], 2) for a, b in zip(five, two))
        assert_matches(result[0], expected_k, f"{what}: keys (the refused update must not write or move anything)")
        assert_matches(result[1], expected_v, f"{what}: values")
    assert r[8] == 7, f"seq_len after filling the cache: {r[8]}, expected 7"


@pytest.mark.points(1)
def test_kv_cache_overflow_error_names_the_limit(submission):
    """ "raises ValueError saying so": the message names max_seq_len or its value (7)."""
    steps = [
        Step("KVCache", (LAYERS, BATCH, MAX_LEN, HEADS, DIM, torch.float32), save_as="cache", send_back=False),
        Step("cache.update", (0, *_kv(8, "eight"))),
    ]
    error = expect_exception("ValueError", lambda: submission.script(steps))
    assert "max_seq_len" in error.message or str(MAX_LEN) in error.message, (
        f"an update of 8 positions into a cache of max_seq_len {MAX_LEN} raised ValueError, but its message does not "
        f"say it goes past max_seq_len ({MAX_LEN}): {error.message}"
    )


PAGED = (3, 4, 1, 2, 4)  # 3 blocks of 4 positions, 1 layer, 2 KV heads of 4


def _rows(new: int, *salt: object) -> tuple[torch.Tensor, torch.Tensor]:
    gen = generator("paged-promises", new, *salt)
    return torch.randn(new, 2, 4, generator=gen), torch.randn(new, 2, 4, generator=gen)


def _observe() -> list[Step]:
    steps = [Step("cache.num_free_blocks")]
    steps += [Step("call_or_error", (Saved("cache"), "block_table", s)) for s in (0, 1)]
    return [*steps, Step("cache.gather", (0, 0))]


@pytest.mark.points(3)
def test_paged_cache_raises_each_documented_error_before_changing_anything(submission):
    """3 blocks of 4: sequence 0 holds 6 positions (2 blocks), sequence 1 none, 1 block free. Each
    bad operation (through the given call_or_error) raises the documented error, and the free
    count, both block tables and sequence 0's contents are what they were. Last, a fork of 0
    whose append of 3 needs a private copy of the shared partly filled block plus a new block
    (2, with 1 free) is out of blocks too."""
    errors = [
        # (operation, arguments, the error, why)
        ("append", (9, 0, *_rows(1, "unknown")), "KeyError", "append to sequence 9, which does not exist"),
        ("fork", (9, 5), "KeyError", "fork of sequence 9, which does not exist"),
        ("free", (9,), "KeyError", "free of sequence 9, which does not exist"),
        ("block_table", (9,), "KeyError", "block_table of sequence 9, which does not exist"),
        ("gather", (9, 0), "KeyError", "gather of sequence 9, which does not exist"),
        ("add_sequence", (0,), "ValueError", "add_sequence(0), which exists"),
        ("fork", (0, 1), "ValueError", "fork(0, 1) to sequence 1, which exists"),
        ("append", (0, 0, *_rows(7, "seven")), "RuntimeError", "append of 7 positions onto 6: 2 new blocks, 1 free"),
    ]
    k, v = _rows(6, "prefix")
    setup = [
        Step("PagedKVCache", PAGED, save_as="cache", send_back=False),
        Step("cache.add_sequence", (0,)),
        Step("cache.append", (0, 0, k, v)),
        Step("cache.add_sequence", (1,)),
    ]
    steps = [*setup, *_observe()]
    for method, args, *_ in errors:
        steps += [Step("call_or_error", (Saved("cache"), method, *args)), *_observe()]
    steps += [Step("cache.fork", (0, 2)), Step("call_or_error", (Saved("cache"), "append", 2, 0, *_rows(3, "cow")))]
    steps += [*_observe(), Step("cache.block_table", (2,))]
    r = submission.script(steps).steps[0][len(setup) :]
    before = r[:4]
    free, table0, table1, (keys, values) = before
    assert free == 1 and table0[0] == "ok" and len(table0[1]) == 2 and tuple(table1) == ("ok", []), (
        f"after adding sequence 0 with 6 positions (blocks of 4) and an empty sequence 1 in a pool of 3 blocks: "
        f"{free} free, tables {table0}, {table1}; expected 1 free, 2 blocks and none"
    )
    for index, (method, args, error, why) in enumerate(errors):
        status, *after = r[4 + 5 * index : 9 + 5 * index]
        shown = (
            f"{method}({', '.join(str(a) if not isinstance(a, torch.Tensor) else f'{a.shape[0]} rows' for a in args)})"
        )
        assert tuple(status) == ("error", error), f"{shown} ({why}) should raise {error}, got {status}"
        assert after[:3] == before[:3], (
            f"{shown} raised {error} but changed the cache: free blocks and tables {before[:3]} became {after[:3]} "
            f"(errors are raised before anything changes)"
        )
        for name, got, want in (("keys", after[3][0], keys), ("values", after[3][1], values)):
            assert_matches(got, want, f"sequence 0's {name} after {shown} raised {error} (nothing may change)")
    _, status, free_after, table0_after, _, _, table2 = r[4 + 5 * len(errors) :]
    shown = "append of 3 positions to a fork of sequence 0 (a copy of its shared partly filled block + 1 new block)"
    assert tuple(status) == ("error", "RuntimeError"), (
        f"{shown}, with 1 free block, should raise RuntimeError, got {status}"
    )
    assert (free_after, table0_after, table2) == (1, table0, table0[1]), (
        f"{shown} raised but changed the cache: {free_after} free (expected 1), sequence 0's table {table0_after}, "
        f"the fork's {table2} (both expected {table0[1]}: the shared blocks, no copy)"
    )


@pytest.mark.points(1)
def test_paged_cache_out_of_blocks_error_says_so(submission):
    """RuntimeError("out of blocks"): the message says so."""
    steps = [
        Step("PagedKVCache", PAGED, save_as="cache", send_back=False),
        Step("cache.add_sequence", (0,)),
        Step("cache.append", (0, 0, *_rows(13, "too-many"))),
    ]
    error = expect_exception("RuntimeError", lambda: submission.script(steps))
    assert "out of blocks" in error.message, (
        f'13 positions in 3 blocks of 4 raised RuntimeError, but not RuntimeError("out of blocks"): {error.message}'
    )


@pytest.mark.points(1)
def test_paged_cache_stores_blocks_in_the_documented_pool(submission):
    """key_blocks and value_blocks: (num_layers, num_blocks, block_size, num_kv_heads, head_dim) in
    the cache's dtype; position p of a sequence's layer l sits at [l, table[p // block_size],
    p % block_size]; gather returns contiguous tensors."""
    shape = (2, 5, 4, 2, 4)
    k0, v0 = _rows(6, "pool-0")
    k1, v1 = _rows(3, "pool-1")
    steps = [
        Step("PagedKVCache", (5, 4, 2, 2, 4, torch.float64), save_as="cache", send_back=False),
        Step("cache.add_sequence", (3,)),
        Step("cache.append", (3, 0, k0, v0)),
        Step("cache.append", (3, 1, k1, v1)),
        Step("cache.gather", (3, 1), save_as="gathered", send_back=False),
        Step("gathered.__getitem__", (0,), save_as="keys", send_back=False),
        Step("keys.is_contiguous"),
        Step("gathered.__getitem__", (1,), save_as="values", send_back=False),
        Step("values.is_contiguous"),
        Step("cache.block_table", (3,)),
        Step("cache.__getattribute__", ("key_blocks",)),
        Step("cache.__getattribute__", ("value_blocks",)),
    ]
    r = submission.script(steps).steps[0]
    table, key_blocks, value_blocks = r[-3:]
    assert r[-6] is True and r[-4] is True, (
        f"gather(seq_id, layer) must return contiguous keys and values; is_contiguous(): {r[-6]}, {r[-4]}"
    )
    for name, pool in (("key_blocks", key_blocks), ("value_blocks", value_blocks)):
        assert isinstance(pool, torch.Tensor) and tuple(pool.shape) == shape and pool.dtype == torch.float64, (
            f"PagedKVCache(5 blocks of 4, 2 layers, 2 KV heads of 4, float64).{name}: "
            f"{tuple(pool.shape) if isinstance(pool, torch.Tensor) else type(pool).__name__} "
            f"{getattr(pool, 'dtype', '')}, expected a float64 tensor of shape {shape} "
            "(num_layers, num_blocks, block_size, num_kv_heads, head_dim)"
        )
    for layer, (k, v) in enumerate(((k0, v0), (k1, v1))):
        for p in range(k.shape[0]):
            where = (layer, table[p // 4], p % 4)
            for name, pool, want in (("key_blocks", key_blocks, k), ("value_blocks", value_blocks, v)):
                assert_matches(
                    pool[where],
                    want[p].double(),
                    f"{name}[{layer}, {where[1]}, {where[2]}]: layer {layer}, position {p} of a sequence with block "
                    f"table {table}",
                )


def _paged_case(lengths: list[int], q_dtype: torch.dtype, *salt: object):
    """A cache of float32 sequences with the given lengths (layer 0), and q for them."""
    gen = generator("paged-decode", *lengths, *salt)
    data = [(torch.randn(n, 2, 4, generator=gen), torch.randn(n, 2, 4, generator=gen)) for n in lengths]
    steps = [Step("PagedKVCache", (32, 4, 1, 2, 4), save_as="cache", send_back=False)]
    for seq, (k, v) in enumerate(data):
        steps += [Step("cache.add_sequence", (seq,)), Step("cache.append", (seq, 0, k, v))]
    q = torch.randn(len(lengths), 4, 4, generator=gen, dtype=torch.float64).to(q_dtype)
    return data, steps, q


@pytest.mark.points(1)
def test_paged_decode_attention_returns_q_dtype(submission):
    """float32 cache, float64 q: the output is float64, against SDPA (enable_gqa) in float64."""
    data, steps, q = _paged_case([5, 2], torch.float64, "dtype")
    out = submission.script([*steps, Step("paged_decode_attention", (q, Saved("cache"), [0, 1], 0))]).steps[0][-1]
    expected = torch.stack(
        [
            F.scaled_dot_product_attention(
                q[b][:, None], k.double().transpose(0, 1), v.double().transpose(0, 1), enable_gqa=True
            )[:, 0]
            for b, (k, v) in enumerate(data)
        ]
    )
    assert_matches(
        out, expected, "paged_decode_attention with a float64 q over a float32 cache (returns q's dtype)", 1e-6, 1e-6
    )


ATTENTION_OPS = ("mm", "bmm", "matmul", "softmax", "scaled_dot_product", "baddbmm", "addmm")
POOL_BLOCKS = 256  # a pool far larger than any batch's keys: reading it is told apart from the rest


def _is_attention_work(op: str) -> bool:
    name = op.removeprefix("aten.").split(".")[0].lstrip("_")
    return any(name == kind or name.startswith(kind) for kind in ATTENTION_OPS)


@pytest.mark.points(2)
def test_paged_decode_attention_does_not_loop_over_sequences(submission, record_property):
    """What the docstring forbids is reading the pool, or attending, once per sequence: the
    operators of one call (probe "reads" in the worker) for 2 and for 8 sequences of lengths
    1-9 read the block pool (an input whose storage is at least the pool's, 256 blocks) the same
    number of times, and run the same number of matmuls and softmaxes. How the block tables are
    padded (one tensor, or row by row) is not counted."""
    pool_bytes = POOL_BLOCKS * 4 * 2 * 4 * 4  # blocks x block_size x kv_heads x head_dim x float32

    def counts(count: int) -> tuple[int, int]:
        lengths = [1 + (3 * i) % 9 for i in range(count)]
        gen = generator("paged-decode-reads", count)
        steps = [Step("PagedKVCache", (POOL_BLOCKS, 4, 1, 2, 4), save_as="cache", send_back=False)]
        for seq, n in enumerate(lengths):
            k, v = torch.randn(n, 2, 4, generator=gen), torch.randn(n, 2, 4, generator=gen)
            steps += [Step("cache.add_sequence", (seq,)), Step("cache.append", (seq, 0, k, v))]
        q = torch.randn(count, 4, 4, generator=gen)
        step = Step(
            "paged_decode_attention", (q, Saved("cache"), list(range(count)), 0), send_back=False, measure=("reads",)
        )
        reads = submission.script([*steps, step]).measurements[0][-1]["reads"]
        pool = sum(1 for _, largest in reads if largest >= pool_bytes)
        attention = sum(1 for op, largest in reads if _is_attention_work(op) and largest < pool_bytes)
        return pool, attention

    (pool_2, attention_2), (pool_8, attention_8) = counts(2), counts(8)
    record_property("pool_reads_2_sequences", pool_2)
    record_property("pool_reads_8_sequences", pool_8)
    record_property("attention_ops_2_sequences", attention_2)
    record_property("attention_ops_8_sequences", attention_8)
    assert pool_8 == pool_2 and attention_8 == attention_2, (
        f"paged_decode_attention read the block pool {pool_2} times and ran {attention_2} matmuls and softmaxes "
        f"for 2 sequences, but {pool_8} and {attention_8} for 8: pad the block tables of the batch to the "
        "longest, read the pool once through them and mask positions past each length, instead of calling "
        "gather (or attention) for each sequence"
    )


@pytest.mark.points(1)
@pytest.mark.parametrize("head_dim", [8, 16])
def test_paged_decode_attention_scales_by_the_square_root_of_head_dim(submission, head_dim):
    """The other paged checks use head_dim 4, where 1/sqrt(d) and other scalings such as 2/d agree:
    here d = 8 and 16, against SDPA (enable_gqa, its default scale 1/sqrt(d)) in float64."""
    gen = generator("paged-head-dim", head_dim)
    data = [(torch.randn(n, 2, head_dim, generator=gen), torch.randn(n, 2, head_dim, generator=gen)) for n in (6, 3)]
    steps = [Step("PagedKVCache", (8, 4, 1, 2, head_dim), save_as="cache", send_back=False)]
    for seq, (k, v) in enumerate(data):
        steps += [Step("cache.add_sequence", (seq,)), Step("cache.append", (seq, 0, k, v))]
    q = torch.randn(2, 4, head_dim, generator=gen)
    out = submission.script([*steps, Step("paged_decode_attention", (q, Saved("cache"), [0, 1], 0))]).steps[0][-1]
    expected = torch.stack(
        [
            F.scaled_dot_product_attention(
                q[b].double()[:, None], k.double().transpose(0, 1), v.double().transpose(0, 1), enable_gqa=True
            )[:, 0]
            for b, (k, v) in enumerate(data)
        ]
    )
    assert_matches(
        out.double(),
        expected,
        f"paged_decode_attention with head_dim {head_dim} (scores scaled by 1/sqrt(head_dim))",
        1e-5,
        1e-5,
    )
