"""Hidden suite, performance: operators counted inside the worker, bytes counted by the kernel,
and the forward time as a ratio against the trusted reference in the same run.

- Vectorisation: the number of aten operators (a TorchDispatchMode, grader/sandbox/probes.py)
  of MoELayer.forward over T and over 8T tokens must be equal: a loop over experts is allowed,
  a loop over tokens is not.
- Expert parallelism: each rank sends the rows of its choices routed to other ranks' experts
  and the results for other ranks' choices routed to its own experts (the payload, computed
  here from the router), plus the counts exchange, plus the framing slack of grader/perf.py.
- Time: MoELayer.forward against the loop-over-experts reference of reference.py (vectorised
  over tokens), run in a trusted worker on the same inputs, rounds interleaved.
"""

from __future__ import annotations

import itertools

import pytest
import torch

from grader.perf import best_ratio, interleaved_ratio, require_reliable, with_slack
from grader.sandbox import CallResult, Saved, Step
from grader.suites.moe.reference import make_params, mixtral_route
from grader.testing import generator

OPS_TOKENS = 64
# The reference layer measures 0.9-2.0x the suite's reference here (2 shared cores, load 4.5);
# a per-token combine measures about 10x (tests/test_moe_checks.py). 4x lies between, with a
# margin of 2 on each side.
TIME_TOKENS = 8192
TIME_RATIO_LIMIT = 4.0


def layer_steps(args: tuple, params: dict[str, torch.Tensor]) -> list[Step]:
    return [
        Step("MoELayer", args, save_as="layer", send_back=False),
        Step("layer.load_state_dict", (params,), send_back=False),
    ]


@pytest.mark.perf
@pytest.mark.points(4)
@pytest.mark.parametrize("capacity_factor", [None, 1.25], ids=["dropless-shared", "capacity-1.25"])
def test_moe_layer_forward_op_count_does_not_grow_with_tokens(submission, capacity_factor, record_property):
    """Operators of a forward over T and over 8T tokens: the same number (no loop over tokens)."""
    d_model, d_ff, experts, k, shared = 32, 64, 8, 2, int(capacity_factor is None)
    params = make_params(d_model, d_ff, experts, shared, generator("ops-params"), torch.float32)
    gen = generator("ops-x", capacity_factor)
    small, large = (torch.randn(n, d_model, generator=gen) for n in (OPS_TOKENS, 8 * OPS_TOKENS))
    steps = [
        *layer_steps((d_model, d_ff, experts, k, capacity_factor, shared), params),
        Step("layer.forward", (small,), send_back=False, measure=("ops",)),
        Step("layer.forward", (large,), send_back=False, measure=("ops",)),
    ]
    figures = submission.script(steps).measurements[0]
    ops_small, ops_large = figures[-2]["ops"], figures[-1]["ops"]
    record_property("ops_at_T", ops_small)
    record_property("ops_at_8T", ops_large)
    assert ops_small == ops_large, (
        f"MoELayer.forward ran {ops_small} tensor operations on {OPS_TOKENS} tokens but {ops_large} on "
        f"{8 * OPS_TOKENS}: the count must not depend on the number of tokens. Replace loops over tokens "
        f"(or over choices) with batched operations; a loop over experts is fine."
    )


def _payload_rows(params: dict[str, torch.Tensor], xs: list[torch.Tensor], k: int) -> list[int]:
    """Rows each rank must send: its choices for other ranks' experts, plus the results of
    other ranks' choices for its own experts."""
    p, experts = len(xs), params["router.weight"].shape[0]
    local = experts // p
    owners = [mixtral_route(x @ params["router.weight"].t(), k)[1] // local for x in xs]
    out = [int((owner != r).sum()) for r, owner in enumerate(owners)]
    back = [sum(int((owner == r).sum()) for s, owner in enumerate(owners) if s != r) for r in range(p)]
    return [o + b for o, b in zip(out, back)]


@pytest.mark.perf
@pytest.mark.points(8)
def test_expert_parallel_sends_only_tokens_routed_to_other_ranks(submission, record_property):
    """4 ranks, 8 experts, k=2, 256 float32 tokens of width 64 per rank; forward only."""
    p, d_model, d_ff, experts, k, tokens = 4, 64, 32, 8, 2, 256
    params = make_params(d_model, d_ff, experts, 0, generator("bytes-params"), torch.float32)
    xs = [torch.randn(tokens, d_model, generator=generator("bytes-x", r)) for r in range(p)]
    steps = [
        [
            *layer_steps((d_model, d_ff, experts, k, None, 0), params),
            Step("shard_experts", (Saved("layer"),), save_as="shard", send_back=False),
            Step("expert_parallel_forward", (Saved("shard"), x), send_back=False),
        ]
        for x in xs
    ]
    result = submission.script_spmd(p, steps)
    if not any(result.bytes_sent):
        pytest.skip("no bytes were counted: NCCL moves data over NVLink/PCIe, where the kernel does not count it")
    rows = _payload_rows(params, xs, k)
    counts_bytes = experts * 8  # one int64 per (destination rank, local expert)
    bounds = [n * d_model * 4 + counts_bytes for n in rows]
    record_property("bytes_sent_per_rank", result.bytes_sent)
    record_property("payload_bytes_per_rank", bounds)
    for r, (sent, bound) in enumerate(zip(result.bytes_sent, bounds)):
        assert sent <= with_slack(bound), (
            f"rank {r} sent {sent:,} bytes; its tokens routed to other ranks' experts and the results it "
            f"owes other ranks come to {bound:,} bytes (+ slack: {int(with_slack(bound)):,}). Send each rank "
            f"only the rows of choices for its experts (uneven split sizes), not every token."
        )


@pytest.mark.perf
@pytest.mark.points(4)
def test_moe_layer_forward_time_within_4x_the_reference(submission, library, record_property):
    """8192 tokens, 8 experts, k=2, dropless: median time of MoELayer.forward (layer built and
    loaded in the same call, a few ms) <= 4x the reference forward in a trusted worker."""
    d_model, d_ff, experts, k = 64, 128, 8, 2
    params = make_params(d_model, d_ff, experts, 0, generator("time-params"), torch.float32)
    x = torch.randn(TIME_TOKENS, d_model, generator=generator("time-x"))
    rounds = itertools.count()  # fresh tokens every round: a remembered answer costs no time

    def candidate() -> CallResult:
        tokens = torch.randn(TIME_TOKENS, d_model, generator=generator("time-x", next(rounds)))
        steps = [
            *layer_steps((d_model, d_ff, experts, k, None, 0), params),
            Step("layer.forward", (tokens,), send_back=False),
        ]
        return submission.script(steps)

    def reference() -> CallResult:
        target = "grader.suites.moe.reference:moe_forward_timed"
        return library.spmd(target, 1, [(params, x, k)], return_result=False)

    ratio = best_ratio(lambda: interleaved_ratio(candidate, reference, rounds=5), TIME_RATIO_LIMIT)
    record_property("time_ratio_vs_reference", round(ratio.ratio, 3))
    record_property("moe_layer_forward_s", round(ratio.candidate_s, 5))
    record_property("reference_forward_s", round(ratio.reference_s, 5))
    require_reliable(ratio)
    assert ratio.ratio <= TIME_RATIO_LIMIT, (
        f"MoELayer.forward took {ratio.candidate_s * 1e3:.1f} ms, {ratio.ratio:.1f}x the reference "
        f"({ratio.reference_s * 1e3:.1f} ms); the limit is {TIME_RATIO_LIMIT:g}x. Batch the work: route, "
        f"dispatch and combine with tensor operations, and run the experts as batched matrix products."
    )
