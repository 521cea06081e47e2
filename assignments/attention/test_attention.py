"""Public tests for the attention module: run them while you work with

    pytest assignments/attention                 (add -s to see what your code prints)
    pytest assignments/attention -k flash_torch --no-timeout   (to use breakpoint())

Your functions run in a worker process, never inside pytest; the references below are computed
here with torch.nn.functional.scaled_dot_product_attention. The hidden suite checks many more
shapes (GQA, MQA, decode, head dims 16 to 128, lengths that are not multiples of the blocks),
float32 and float64, the Triton kernels, MLA, and counts the largest tensor your FlashAttention
creates; `make grade` gives the score. Triton kernels run in the Triton interpreter on a CPU
(slow: keep shapes tiny when you try them).
"""

from __future__ import annotations

import math
import os

import torch
import torch.nn.functional as F

from grader.sandbox import Step, SubmissionError
from grader.testing import assert_matches, expect_exception, generator, random_tensor


def qkv(heads, kv_heads, seq_q, seq_k, head_dim, dtype, *salt):
    gen = generator("public", *salt)
    q = random_tensor((1, heads, seq_q, head_dim), dtype, gen)
    k, v = (random_tensor((1, kv_heads, seq_k, head_dim), dtype, gen) for _ in range(2))
    return q, k, v, random_tensor(q.shape, dtype, gen)


def sdpa(q, k, v, causal):
    """The reference, with the causal mask aligned to the end of the keys (decode case)."""
    mask = torch.ones(q.shape[2], k.shape[2], dtype=torch.bool).tril(k.shape[2] - q.shape[2]) if causal else None
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=q.shape[1] != k.shape[1])


def sdpa_grads(q, k, v, grad_out, causal):
    q, k, v = (t.double().requires_grad_() for t in (q, k, v))
    sdpa(q, k, v, causal).backward(grad_out.double())
    return q.grad, k.grad, v.grad


def forward_backward(submission, name, q, k, v, grad_out, causal, measure=()):
    """(out, lse, dq, dk, dv) from your code, through the helper forward_backward in reference.py."""
    try:
        return submission.function("forward_backward").run((name, q, k, v, grad_out, causal), measure=measure)
    except SubmissionError as error:
        if error.kind != "not_implemented":
            raise
        submission.function(name)(q, k, v, causal=causal)  # says which forward is missing
        file = submission.module.function(name).file
        where = os.path.relpath(submission.directory / file)
        message = f"{name} is not implemented yet: its backward is missing; implement it in {where}"
        raise SubmissionError("not_implemented", name, message) from None


def test_attention_matches_sdpa_with_gqa_and_causal_decode(submission):
    q, k, v, _ = qkv(4, 2, 3, 20, 16, torch.float64, "gqa")  # 3 new queries over 20 keys
    out = submission.function("attention")(q, k, v, causal=True)
    what = (
        "attention (GQA 4/2 heads, 3 queries over 20 keys, causal aligned to the END of the keys: query i "
        "sees keys 0..i+17, as decoding with a cache needs; not SDPA's is_causal, which aligns to the top-left)"
    )
    assert_matches(out, sdpa(q, k, v, True), what, 1e-9, 1e-9)


def test_attention_rejects_incompatible_heads(submission):
    q, k = torch.randn(1, 3, 4, 16), torch.randn(1, 2, 4, 16)
    expect_exception("ValueError", lambda: submission.function("attention")(q, k, k))


def test_flash_attention_torch_forward_lse_and_gradients_match_sdpa(submission):
    q, k, v, grad_out = qkv(2, 1, 70, 70, 16, torch.float64, "flash")  # 70 = a block of 64 + 6
    out, lse, dq, dk, dv = forward_backward(submission, "flash_attention_torch", q, k, v, grad_out, True).output
    assert_matches(out, sdpa(q, k, v, True), "flash_attention_torch: out", 1e-9, 1e-9)
    scores = (q @ k.transpose(-2, -1) / math.sqrt(16)).masked_fill(torch.ones(70, 70).triu(1).bool(), -math.inf)
    assert_matches(lse, scores.logsumexp(-1), "flash_attention_torch: lse", 1e-9, 1e-9)
    for name, mine, expected in zip(("dq", "dk", "dv"), (dq, dk, dv), sdpa_grads(q, k, v, grad_out, True)):
        assert_matches(mine, expected, f"flash_attention_torch: {name}", 1e-8, 1e-8)


def test_flash_attention_torch_never_creates_a_seq_by_seq_tensor(submission):
    """The largest tensor any operator produced, forward and backward, counted in the worker."""
    q, k, v, grad_out = qkv(2, 2, 512, 512, 16, torch.float32, "memory")
    result = forward_backward(submission, "flash_attention_torch", q, k, v, grad_out, False, measure=("largest",))
    figures = result.measurements[0][0]
    largest, scores = figures["largest"], q.shape[0] * q.shape[1] * q.shape[2] * k.shape[2]
    assert largest <= q.numel(), (
        f"flash_attention_torch (forward + backward) created a tensor of {largest:,} elements "
        f"({figures['largest_op']}); the limit is {q.numel():,} (the size of q), the full score matrix has "
        f"{scores:,}. Work on one block_q x block_k tile of scores at a time, in the forward and in the "
        f"backward (recompute P from lse instead of keeping it)."
    )


def test_flash_attention_triton_matches_sdpa_in_the_interpreter(submission):
    q, k, v, grad_out = qkv(2, 2, 20, 20, 16, torch.float32, "triton")
    out, _, dq, dk, dv = forward_backward(submission, "flash_attention_triton", q, k, v, grad_out, True).output
    assert_matches(out, sdpa(q, k, v, True), "flash_attention_triton: out", 1e-4, 1e-5)
    for name, mine, expected in zip(("dq", "dk", "dv"), (dq, dk, dv), sdpa_grads(q, k, v, grad_out, True)):
        assert_matches(mine, expected.float(), f"flash_attention_triton: {name}", 1e-4, 1e-4)


def test_mla_absorbed_forward_agrees_with_the_naive_one(submission):
    x = random_tensor((1, 7, 32), torch.float64, generator("public-mla"))
    steps = [
        Step("MultiHeadLatentAttention", (32, 4, 8, 6), save_as="mla", send_back=False),
        Step("mla.double", send_back=False),
        Step("mla.forward", (x,)),
        Step("mla.forward_absorbed", (x,)),
    ]
    naive, absorbed = submission.script(steps).steps[0][2:]
    assert_matches(absorbed, naive, "forward_absorbed against forward", 1e-9, 1e-9)


def test_cache_bytes_per_token_for_mha_and_mla(submission):
    cache_bytes = submission.function("cache_bytes_per_token")
    assert cache_bytes("mha", 2, 4, 64) == 2 * 2 * 4 * 64 * 2, "mha: layers x (k and v) x heads x head_dim x 2 bytes"
    assert cache_bytes("mla", 2, 4, 64, kv_latent_dim=32) == 2 * 32 * 2, "mla: layers x latent x 2 bytes"
