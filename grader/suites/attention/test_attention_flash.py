"""Hidden suite: FlashAttention in PyTorch and in Triton, against
torch.nn.functional.scaled_dot_product_attention computed in the grader (float64, enable_gqa,
end-aligned causal mask): out, lse (logsumexp of the scaled scores) and the gradients of q, k, v
(autograd through SDPA). Sequence lengths are deliberately not multiples of the blocks.

Triton kernels run under the Triton interpreter on CPU (TRITON_INTERPRET=1, set by the grader),
so their shapes stay tiny; bf16/fp16 on a GPU are in test_attention_gpu.py."""

from __future__ import annotations

import pytest
import torch

from grader.suites.attention.attention_reference import Case, check_against_reference, forward_backward

FLASH_CASES = [
    Case(2, 4, 4, 100, 100, 16, False, torch.float64),
    Case(1, 4, 2, 130, 130, 32, True, torch.float64),  # GQA, 130 = 2 blocks of 64 + 2
    Case(1, 4, 1, 5, 77, 64, True, torch.float32),  # MQA decode
    Case(2, 2, 2, 65, 40, 128, False, torch.float32),  # more queries than keys
    Case(1, 8, 2, 90, 90, 48, True, torch.float32),
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
]


@pytest.mark.points(5)
@pytest.mark.parametrize("case", TRITON_CASES, ids=lambda c: c.id)
def test_flash_attention_triton_matches_sdpa_in_the_interpreter(submission, case):
    mine, expected, _ = forward_backward(submission, "flash_attention_triton", case, "triton")
    check_against_reference(
        mine, expected, case.dtype, f"flash_attention_triton on {case.described}", keys=("out", "lse")
    )
    check_against_reference(mine, expected, case.dtype, f"flash_attention_triton backward on {case.described}")
