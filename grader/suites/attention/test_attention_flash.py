"""Hidden suite: FlashAttention in PyTorch and in Triton, against
torch.nn.functional.scaled_dot_product_attention computed in the grader (float64, enable_gqa,
end-aligned causal mask): out, lse (logsumexp of the scaled scores) and the gradients of q, k, v
(autograd through SDPA). Sequence lengths are deliberately not multiples of the blocks.

Triton kernels run under the Triton interpreter on CPU (TRITON_INTERPRET=1, set by the grader),
so their shapes stay tiny; bf16/fp16 on a GPU are in test_attention_gpu.py."""

from __future__ import annotations

import pytest
import torch

from grader.sandbox import Step
from grader.suites.attention.attention_reference import Case, check_against_reference, forward_backward
from grader.testing import generator, random_tensor

FLASH_CASES = [
    Case(2, 4, 4, 100, 100, 16, False, torch.float64),
    Case(1, 4, 2, 130, 130, 32, True, torch.float64),  # GQA, 130 = 2 blocks of 64 + 2
    Case(1, 4, 1, 5, 77, 64, True, torch.float32),  # MQA decode
    Case(2, 2, 2, 65, 40, 128, False, torch.float32),  # more queries than keys
    Case(1, 8, 2, 90, 90, 48, True, torch.float32),
    # Half precision: out in q's dtype, lse in float32, gradients in their inputs' dtypes.
    Case(1, 4, 2, 45, 70, 32, True, torch.bfloat16),
    Case(2, 2, 1, 66, 33, 16, False, torch.float16),
]


@pytest.mark.points(3)
@pytest.mark.parametrize("case", FLASH_CASES, ids=lambda c: c.id)
def test_flash_attention_torch_forward_and_lse_match_sdpa(submission, case):
    mine, expected, _ = forward_backward(submission, "flash_attention_torch", case, "flash-torch")
    check_against_reference(
        mine, expected, case.dtype, f"flash_attention_torch on {case.described}", keys=("out", "lse")
    )


@pytest.mark.points(4)
@pytest.mark.parametrize("case", FLASH_CASES, ids=lambda c: c.id)
def test_flash_attention_torch_gradients_match_autograd_through_sdpa(submission, case):
    mine, expected, _ = forward_backward(submission, "flash_attention_torch", case, "flash-torch")
    check_against_reference(mine, expected, case.dtype, f"flash_attention_torch backward on {case.described}")


@pytest.mark.points(2)
@pytest.mark.parametrize(("block_q", "block_k"), [(16, 32), (128, 16), (3, 2)])
def test_flash_attention_torch_honours_other_block_sizes(submission, block_q, block_k):
    """(3, 2): a key tile starts exactly on the diagonal of a query tile's last row (key 2 for
    rows 0-2), the one tile a causal skip with < instead of <= leaves out."""
    case = Case(1, 2, 1, 70, 70, 16, True, torch.float64)
    q, k, v, _ = case.inputs("blocks", block_q, block_k)
    out, lse = submission.function("flash_attention_torch")(q, k, v, causal=True, block_q=block_q, block_k=block_k)
    _, expected, _ = forward_backward(submission, "attention", case, "blocks", block_q, block_k)
    check_against_reference(
        {"out": out, "lse": lse}, expected, case.dtype, f"blocks {block_q}x{block_k}", keys=("out", "lse")
    )


TRITON_CASES = [
    Case(1, 2, 2, 37, 37, 16, True),
    Case(1, 4, 2, 20, 33, 32, False),  # GQA, lengths that are not multiples of 16
    Case(2, 2, 1, 3, 29, 24, True),  # MQA decode, a head_dim that is not a power of two
    Case(1, 2, 2, 18, 18, 128, True),
    Case(1, 4, 2, 21, 35, 16, True, torch.float16),  # out in float16, lse in float32
]


@pytest.mark.points(5)
@pytest.mark.parametrize("case", TRITON_CASES, ids=lambda c: c.id)
def test_flash_attention_triton_matches_sdpa_in_the_interpreter(submission, case):
    mine, expected, _ = forward_backward(submission, "flash_attention_triton", case, "triton")
    check_against_reference(
        mine, expected, case.dtype, f"flash_attention_triton on {case.described}", keys=("out", "lse")
    )
    check_against_reference(mine, expected, case.dtype, f"flash_attention_triton backward on {case.described}")


def _cache_view(rows: int, capacity: int, head_dim: int, gen: torch.Generator) -> torch.Tensor:
    """The first `rows` positions of a (1, 1, capacity, head_dim) float32 KV cache whose other
    positions hold NaN (as torch.empty may). With batch 1 and one kv head the view is contiguous,
    so .contiguous() keeps the cache's memory, NaN rows included, right after the last key."""
    cache = torch.full((1, 1, capacity, head_dim), float("nan"))
    cache[:, :, :rows] = random_tensor((1, 1, rows, head_dim), torch.float32, gen)
    return cache[:, :, :rows]


@pytest.mark.points(2)
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
def test_flash_attention_triton_ignores_the_cache_past_the_keys(submission, causal):
    """Docstring: "k and v may be views into a larger buffer ... the results depend only on their
    Nk rows, whatever the memory past them holds, even NaN". MQA (4 query heads over the one kv
    head of a cache), 11 queries over the first 29 of 40 cached positions: 29 is prime, so every
    key tile wider than 1 (but 29) reaches past the last key, and a load of K or V whose mask lets
    row Nk through multiplies a zero probability by NaN (forward, or dQ in the backward)."""
    case = Case(1, 4, 1, 11, 29, 32, causal)
    gen = generator("cache-view", causal)
    q = random_tensor((1, 4, 11, 32), torch.float32, gen)
    k, v = _cache_view(29, 40, 32, gen), _cache_view(29, 40, 32, gen)
    grad_out = random_tensor((1, 4, 11, 32), torch.float32, gen)
    mine, expected, _ = forward_backward(submission, "flash_attention_triton", case, inputs=(q, k, v, grad_out))
    what = (
        f"flash_attention_triton on {case.described}, with k and v the first 29 rows of a cache of 40 whose "
        f"rows 29-39 hold NaN (mask every load of K and V with key < Nk, in every kernel)"
    )
    check_against_reference(mine, expected, torch.float32, what, keys=("out", "lse", "dq", "dk", "dv"))


@pytest.mark.points(1)
def test_flash_attention_torch_lse_is_not_differentiable(submission):
    """Docstring: "Differentiable through FlashAttentionTorch (out only: lse is not
    differentiable)": with q, k and v requiring grad, out requires grad and lse does not (the
    lecture's ctx.mark_non_differentiable), so a loss that uses lse fails loudly instead of its
    gradient through lse being dropped without a word by a backward that ignores grad_lse."""
    q, k, v, _ = Case(1, 4, 2, 7, 10, 16, True).inputs("lse-not-differentiable")
    steps = [
        Step(
            "flash_attention_torch",
            tuple(t.requires_grad_() for t in (q, k, v)),
            {"causal": True},
            save_as="result",
            send_back=False,
        ),
        Step("result.__getitem__", (0,), save_as="out", send_back=False),
        Step("result.__getitem__", (1,), save_as="lse", send_back=False),
        Step("out.requires_grad.__bool__"),
        Step("lse.requires_grad.__bool__"),
    ]
    out_requires_grad, lse_requires_grad = submission.script(steps).steps[0][3:]
    call = "flash_attention_torch(q, k, v, causal=True) with q, k, v requiring grad"
    assert out_requires_grad, f"{call}: out.requires_grad is False, expected True (out is differentiable)"
    assert not lse_requires_grad, (
        f"{call}: lse.requires_grad is True, expected False: mark lse non-differentiable in "
        f"FlashAttentionTorch.forward (ctx.mark_non_differentiable(lse)), as your backward ignores grad_lse"
    )
