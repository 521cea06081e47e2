"""Every performance (counted) check of module context_parallel, both ways: the reference passes
it and a wasteful variant (tests/variants/context_parallel/) fails it while its results stay right.
The counters are checked too: the reference's figures are not zero and sit where the lecture says
(a blind counter would pass anything)."""

from __future__ import annotations

from functools import partial

import pytest
from conftest import assert_only_failing, grade_variant, module_results

EQUAL = "ring_attention_matches_sdpa_on_the_whole_sequence"  # the ring's and the zigzag ring's
BYTES = "test_ring_attention_sends_p_minus_1_kv_blocks_forward_and_twice_that_backward"
LIBRARY = "test_ulysses_and_allgather_kv_send_no_more_than_the_librarys_collectives"
LARGEST = "test_ring_attention_holds_one_block_of_scores_at_most"
FLOPS = "test_causal_ring_skips_hidden_blocks_and_zigzag_balances_the_flops"
OVERLAP = "test_ring_attention_posts_the_next_block_before_computing_on_this_one"
KINDS = "test_every_variant_calls_only_the_collectives_its_docstring_names"
SWEEP = "test_every_variant_in_a_group_of_ranks_0_1_3_beside_a_group_of_1_in_a_world_of_4"  # reads KINDS' run
RING_CHECKS = f"{EQUAL} or {BYTES} or {LARGEST} or {FLOPS} or {OVERLAP} or {KINDS} or {SWEEP}"
ALLGATHER_CHECKS = f"allgather_kv_attention_matches_sdpa or {LIBRARY} or {KINDS} or {SWEEP}"

grade = partial(grade_variant, "context_parallel")  # grade(tmp_path, variant, select)


@pytest.fixture(scope="module")
def reference(solutions_results) -> dict[str, dict]:
    return module_results(solutions_results, "context_parallel")


def test_reference_sends_what_cp_comm_bytes_says(reference):
    test = reference[BYTES]
    assert test["status"] == "passed", test["output"]
    figures = test["extra_data"]
    forward, backward = figures["cp_comm_bytes"]
    assert (forward, backward) == (36864, 73728), figures  # p=4, b=2, 4 kv heads, s_local=12, d=8, float64
    # one extra message of the smallest block (one K or dK) exceeds all the framing allowed
    assert figures["slack_bytes"] < figures["smallest_block_bytes"] == 6144, figures
    for sent in figures["forward_bytes_per_rank"]:
        assert forward <= sent <= 1.05 * forward, figures
    for sent in figures["backward_bytes_per_rank"]:
        assert backward <= sent <= 1.05 * backward, figures
    for variant in ("ulysses", "allgather_kv"):
        test = reference[f"{LIBRARY}[{variant}]"]
        assert test["status"] == "passed", test["output"]
        figures = test["extra_data"]
        ideal = sum(figures["cp_comm_bytes"])
        assert all(ideal <= n <= figures["bytes_allowed"] for n in figures["bytes_sent_per_rank"]), figures


def test_reference_holds_one_block_of_scores(reference):
    for p in (2, 4):
        test = reference[f"{LARGEST}[{p}]"]
        assert test["status"] == "passed", test["output"]
        figures = test["extra_data"]
        for case, largest in figures["largest_elements_per_case"].items():
            heads = case.split("-")[1]
            # GQA 8/4: the scores of one block; MHA 4/4: the stacked K/V pair (2 x 4 heads x 8 x 8 x b)
            want = figures["one_score_block"][heads] if heads == "gqa" else 2 * figures["one_score_block"][heads]
            assert set(largest) == {want}, (case, figures)


def test_reference_flops_are_contiguous_p_to_1_and_zigzag_flat(reference):
    for p in (2, 4):
        test = reference[f"{FLOPS}[{p}]"]
        assert test["status"] == "passed", test["output"]
        figures = test["extra_data"]
        assert figures["contiguous_last_over_first_mha"] == p, figures
        flops = figures["flops_per_rank"]
        assert len(set(flops["zigzag-gqa-causal"])) == 1, flops
        assert flops["zigzag-gqa-causal"][0] * 2 * p == flops["zigzag-gqa-full"][0] * (p + 1), flops
        assert flops["ring-mha-causal"] == [flops["ring-mha-full"][0] * (r + 1) // p for r in range(p)], flops


def test_reference_overlaps_every_k_v_receive(reference):
    for p in (2, 4):
        test = reference[f"{OVERLAP}[{p}]"]
        assert test["status"] == "passed", test["output"]
        for ranks in test["extra_data"]["p2p_order"].values():
            for order in ranks:
                # forward p-1 and backward p-1 K/V receives, and p-2 of the p-1 travelling dK/dV
                assert order["receives"] == 3 * (p - 1), order
                assert order["overlapped_receives"] == 3 * (p - 1) - 1, order
                assert order["matmuls"] > 0, order


def test_reference_calls_the_collectives_its_docstrings_name(reference):
    test = reference[KINDS]
    assert test["status"] == "passed", test["output"]
    calls = test["extra_data"]["calls_per_layer"]
    # the probe sees the ring's messages (it is not blind): forward p-1 K/V exchanges, backward p-1
    # of K/V and p-1 of dK/dV, each a send and a receive; a group of one sends nothing
    for case in ("ring-gqa9/3-causal", "zigzag-gqa9/3-full"):
        for rank in (0, 1, 3):
            assert calls[f"{case} (0, 1, 3) rank {rank}"] == ["send", "recv"] * 6, calls
        assert calls[f"{case} (2,) rank 2"] == [], calls
    for layer, ops in calls.items():  # the library's all_to_all_single, all_gather_single and
        if layer.startswith(("ulysses", "allgather_kv")):  # reduce_scatter_single: never an all-reduce
            assert not any(op.startswith("allreduce") for op in ops), (layer, ops)


def test_concatenating_the_scores_is_right_but_fails_the_largest_tensor_and_the_flops(tmp_path):
    tests = grade(tmp_path, "concatenate_the_scores", RING_CHECKS)
    assert_only_failing(tests, LARGEST, FLOPS)
    assert "made a tensor of 2,048 elements" in tests[f"{LARGEST}[4]"]["output"]


def test_repeating_kv_heads_is_right_but_fails_the_bytes(tmp_path):
    tests = grade(tmp_path, "repeat_kv_heads", RING_CHECKS)
    assert_only_failing(tests, BYTES, LARGEST)
    assert "forward sent 74," in tests[BYTES]["output"]


def test_waiting_before_computing_is_right_but_fails_the_overlap(tmp_path):
    tests = grade(tmp_path, "wait_before_compute", RING_CHECKS)
    assert_only_failing(tests, OVERLAP)
    assert "of which 0 had a matmul" in tests[f"{OVERLAP}[2]"]["output"]


def test_zigzag_without_skipping_is_right_but_fails_the_balance(tmp_path):
    tests = grade(tmp_path, "zigzag_without_skipping", RING_CHECKS)
    assert_only_failing(tests, FLOPS)
    assert "at most (p+1)/(2p)" in tests[f"{FLOPS}[4]"]["output"]


def test_gradients_setting_out_from_the_owner_are_right_but_fail_the_bytes(tmp_path):
    # p hops of every dK/dV block instead of p-1: one stacked dK/dV block (12,288 bytes) too many
    # per rank, more than the 4,608 bytes of framing the check allows
    tests = grade(tmp_path, "gradients_set_out_from_the_owner", RING_CHECKS)
    assert_only_failing(tests, BYTES)
    assert "allow 115,200" in tests[BYTES]["output"]


def test_all_reducing_the_kv_gradients_is_right_but_fails_the_kinds_of_collective(tmp_path):
    # on gloo the all-reduce sends the reference's bytes: only the kind of call tells it apart
    tests = grade(tmp_path, "all_reduce_the_kv_gradients", ALLGATHER_CHECKS)
    assert_only_failing(tests, KINDS)
    assert tests[f"{LIBRARY}[allgather_kv]"]["status"] == "passed"
    assert "its backward called dist.all_reduce" in tests[KINDS]["output"]
