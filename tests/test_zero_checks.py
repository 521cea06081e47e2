"""Every performance (counted) check of module zero, both ways: the reference passes it and a
wasteful variant (tests/variants/zero/) fails it while still training correctly. The counters
are checked too: the reference's figures are not zero (a blind counter would pass anything)."""

from __future__ import annotations

from functools import partial

import pytest
from conftest import assert_only_failing, by_name, grade_variant, measured, module_results

SAVED = "test_checkpointing_saves_only_segment_boundaries"
BUCKETS = "test_ddp_allreduces_each_gradient_once_in_buckets"
OVERLAP = "test_ddp_starts_allreduce_while_backward_is_running"
STATE = "test_sharded_optimizer_keeps_a_1_over_p_share_of_the_state"
TORCH_ZERO = "test_sharded_optimizer_stage_1_matches_torch_zero_redundancy_optimizer"
RESIDENT = "test_fully_shard_holds_only_its_shards_between_layers"
TIME = "test_ddp_training_time_within_3x_torch_distributed_data_parallel"
MIXED_SUM = "test_fully_shard_mixed_precision_sums_gradients_in_fp32"
MIXED_MEMORY = "test_fully_shard_mixed_precision_gathers_layers_in_compute_dtype"


grade = partial(grade_variant, "zero")  # grade(tmp_path, variant, select)


@pytest.fixture(scope="module")
def reference(solutions_results) -> dict[str, dict]:
    """The reference solution's grading (the session's full grading of the solutions)."""
    return module_results(solutions_results, "zero")


def test_reference_saves_exactly_the_segment_boundaries(reference):
    test = reference[SAVED]
    assert test["status"] == "passed", test["output"]
    figures = test["extra_data"]
    # 16 blocks: the plain forward keeps x and 16 tanh outputs, 4 segments keep 4 inputs.
    assert figures["saved_bytes_checkpointed"] == figures["bound"] > 0
    assert figures["saved_bytes_plain"] == 17 * figures["bound"] // 4
    boundary = figures["bound"] // 4
    for case in figures["cases"]:  # segments that do not divide the blocks too: exactly `segments` inputs
        assert case["checkpointed"] == case["segments"] * boundary, case
        assert case["plain"] == (case["blocks"] + 1) * boundary, case


def test_reference_allreduces_every_element_once_in_three_buckets_during_backward(reference):
    for name in (BUCKETS, OVERLAP):
        assert reference[name]["status"] == "passed", reference[name]["output"]
    figures = reference[BUCKETS]["extra_data"]
    assert figures["buckets"] == 3
    assert all(calls == 3 for calls in figures["calls_per_step"])
    assert all(early == 3 for early in reference[OVERLAP]["extra_data"]["calls_before_backward_returned"])


def test_reference_optimizer_state_is_sharded_like_torch_zero_redundancy_optimizer(reference):
    test = reference[TORCH_ZERO]
    assert test["status"] == "passed", test["output"]
    assert test["extra_data"]["state_bytes_per_rank"] == test["extra_data"]["torch_zero_state_bytes_per_rank"]
    for case in ("world=2-stage1", "world=2-stage2", "world=4-stage2"):
        test = reference[f"{STATE}[{case}]"]
        assert test["status"] == "passed", test["output"]
        figures = test["extra_data"]
        assert 0 < sum(figures["state_bytes_per_rank"]) <= figures["unsharded_state_bytes"]


def test_plain_forward_is_correct_but_fails_the_saved_bytes_bound(tmp_path):
    tests = grade(tmp_path, "no_checkpointing", "checkpointed_forward or segment_boundaries")
    assert_only_failing(
        tests,
        SAVED,
        "test_checkpointed_forward_matches_the_plain_forward_and_saves_less",
        "test_checkpointed_forward_recomputes_segments_groups_of_nearly_equal_size",  # it recomputes nothing
    )
    assert "only the 4 segment inputs" in tests[SAVED]["output"]


def test_torch_utils_checkpoint_is_refused(tmp_path):
    tests = grade(tmp_path, "torch_utils_checkpoint", "gives_the_plain_forwards")
    assert tests and all(t["status"] == "failed" for t in tests.values())
    assert all("may not call torch.utils.checkpoint.checkpoint" in t["output"] for t in tests.values())


def test_torch_distributed_data_parallel_is_refused(tmp_path):
    tests = grade(tmp_path, "torch_ddp_inside", "test_ddp_training_matches")
    assert tests and all(t["status"] == "failed" for t in tests.values())
    assert all("may not call torch.nn.parallel.DistributedDataParallel" in t["output"] for t in tests.values())


@pytest.mark.timed
def test_reference_ddp_trains_within_the_time_limit_of_torch_ddp(reference_timed_results):
    test = measured(by_name(reference_timed_results)[TIME])
    assert test["status"] == "passed", test["output"]
    assert test["extra_data"]["torch_ddp_s"] > 0


@pytest.mark.timed
def test_per_parameter_allreduce_is_correct_but_fails_the_bucket_count_and_the_time_limit(tmp_path):
    select = "test_ddp_training or once_in_buckets or while_backward or training_time"
    tests = grade(tmp_path, "per_parameter_allreduce", select)
    assert_only_failing(tests, BUCKETS, TIME)
    assert "6 dist.all_reduce calls" in tests[BUCKETS]["output"]
    assert measured(tests[TIME])["extra_data"]["time_ratio_vs_torch_ddp"] > 3.0


def test_allreduce_after_backward_is_correct_but_fails_the_overlap_check(tmp_path):
    tests = grade(
        tmp_path, "allreduce_after_backward", "test_ddp_training_matches or once_in_buckets or while_backward"
    )
    assert_only_failing(tests, OVERLAP)


def test_full_state_on_every_rank_trains_correctly_but_fails_the_state_bound(tmp_path):
    tests = grade(tmp_path, "full_state_on_every_rank", "sharded_optimizer_training or 1_over_p or zero_redundancy")
    assert_only_failing(tests, STATE, TORCH_ZERO)
    for case in ("world=2-stage1", "world=2-stage2", "world=4-stage2"):
        figures = tests[f"{STATE}[{case}]"]["extra_data"]
        assert figures["state_bytes_per_rank"] == [figures["unsharded_state_bytes"]] * len(
            figures["state_bytes_per_rank"]
        )


def test_stage2_keeping_all_gradients_fails_only_the_stage2_gradient_bound(tmp_path):
    tests = grade(tmp_path, "stage2_keeps_all_gradients", "sharded_optimizer_training or 1_over_p")
    assert_only_failing(tests, f"{STATE}[world=2-stage2]", f"{STATE}[world=4-stage2]")
    assert "holds 3264 bytes of gradients" in tests[f"{STATE}[world=2-stage2]"]["output"]


def test_reference_fully_shard_holds_its_shards_and_no_full_layer(reference):
    for case in ("world=2-mlp", "world=4-transformer"):
        test = reference[f"{RESIDENT}[{case}]"]
        assert test["status"] == "passed", test["output"]
        figures = test["extra_data"]
        # The count sees the shards themselves: at least 1/p of the model, never a whole layer more.
        world_size = int(case[6])
        assert all(
            figures["model_bytes"] / world_size <= n < figures["resident_bound"] - figures["largest_layer_bytes"]
            for n in figures["resident_bytes_per_rank"]
        )


def test_full_parameters_kept_resident_train_correctly_but_fail_the_resident_bound(tmp_path):
    tests = grade(
        tmp_path, "full_parameters_resident", "holds_only_its_shards or (fully_shard_training and plain and adamw)"
    )
    assert_only_failing(tests, RESIDENT)
    assert "between two layers rank 0 held 9920 bytes" in tests[f"{RESIDENT}[world=2-mlp]"]["output"]


def test_parameters_kept_only_by_autograd_are_counted_too(tmp_path):
    tests = grade(tmp_path, "autograd_keeps_gathered_parameters", "holds_only_its_shards and mlp")
    assert_only_failing(tests, RESIDENT)
    figures = tests[f"{RESIDENT}[world=2-mlp]"]["extra_data"]
    assert min(figures["resident_bytes_per_rank"]) > figures["resident_bound"]


def test_reference_fully_shard_mixed_precision_holds_each_layer_once_in_16_bits(reference):
    for case in ("world=2-adamw-bf16", "world=4-sgd-fp16"):
        test = reference[f"{MIXED_MEMORY}[{case}]"]
        assert test["status"] == "passed", test["output"]
        figures = test["extra_data"]
        shards, layer = figures["fp32_shard_bytes"], figures["largest_layer_bytes_fp32"]
        # The count sees the fp32 shards, and while a layer runs its 16-bit copy, never the fp32 one.
        assert all(shards <= n < shards + layer // 2 for n in figures["resident_bytes_per_rank"])
        assert all(shards + layer // 2 <= n < shards + layer for n in figures["layer_peak_bytes_per_rank"])


def test_gathering_in_fp32_then_casting_trains_the_same_but_fails_the_mixed_precision_memory_bound(tmp_path):
    tests = grade(tmp_path, "gather_in_fp32_then_cast", "mixed_precision and adamw")
    assert_only_failing(tests, MIXED_MEMORY)
    test = tests[f"{MIXED_MEMORY}[world=2-adamw-bf16]"]
    figures = test["extra_data"]
    # While the layer runs it is there twice, in fp32 and in bf16 (between layers the fp32 copy
    # is gone, or not yet, as gloo's thread lets go of it: that count alone would not tell).
    assert min(figures["layer_peak_bytes_per_rank"]) > figures["layer_peak_bound"]
    assert "BEFORE dist.all_gather_into_tensor" in test["output"]


def test_summing_gradients_in_16_bits_is_close_to_one_process_but_fails_the_fp32_sum(tmp_path):
    tests = grade(tmp_path, "reduce_gradients_in_compute_dtype", "mixed_precision and bf16")
    assert_only_failing(tests, MIXED_SUM)
    assert "BEFORE dist.reduce_scatter_tensor" in tests[f"{MIXED_SUM}[world=2-sgd-bf16]"]["output"]
