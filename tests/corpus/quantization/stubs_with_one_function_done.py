"""The stubs with only sqnr_db written: its tests pass, every other test says what to implement."""

# ruff: noqa: E501, F821 - a fragment appended to a stub file, whose names are in scope
# target: metrics.py
# base: stubs
# select: sqnr_db_matches or symmetric_int8_per_tensor or fp8_matches_torch_cast
# fails: symmetric_int8|fp8
# kind: not_implemented
# message: quantize_fp8 is not implemented yet: implement it in .*quantization/fp8\.py \(see lectures/06-quantization\.md, section 6


def sqnr_db(x, x_hat):
    x, x_hat = x.double(), x_hat.double()
    noise = (x - x_hat).pow(2).sum()
    return float("inf") if noise == 0 else float(10 * torch.log10(x.pow(2).sum() / noise))
