"""Module post_training: the counted check of the weight sync, both ways. The reference passes
it, and its counted bytes are at least the least traffic (a blind counter would pass anything);
a sync that sends the whole model to every rank (an all-gather written with point-to-point
sends, tests/variants/post_training/) returns the right shards everywhere but fails the bytes
check of every placement, and only that check. Bytes are counted, never timed: the same verdict
on every machine."""

from __future__ import annotations

from functools import partial

import pytest
from conftest import assert_only_failing, grade_variant, module_results

from grader.perf import with_slack

BYTES = "test_sync_weights_sends_at_most_the_least_traffic"
VALUES = (
    "test_sync_weights_colocated_on_4_ranks_gives_each_rank_its_tp_shard",
    "test_sync_weights_disaggregated_gives_engine_ranks_their_shards_and_trainer_ranks_none",
    "test_sync_weights_with_ranks_out_of_order_follows_positions_in_the_lists",
    "test_sync_weights_with_a_trainer_of_3_pads_chunks_and_mixes_roles_on_5_ranks",
)
PLACEMENTS = (
    "colocated-4-ranks-as-2-replicas-of-tp-2",
    "disaggregated-trainer-0-1-engine-2-3",
    "out-of-order-trainer-3-1-engine-0-2-float32",
    "trainer-of-3-on-5-ranks-4-0-2-engine-2-3",
)

grade = partial(grade_variant, "post_training")  # grade(tmp_path, variant, select)


@pytest.fixture(scope="module")
def reference(solutions_results) -> dict[str, dict]:
    return module_results(solutions_results, "post_training")


def test_sync_reference_sends_at_least_the_least_traffic_and_passes(reference):
    for placement in PLACEMENTS:
        test = reference[f"{BYTES}[{placement}]"]
        assert test["status"] == "passed", test["output"]
        sent, least = test["extra_data"]["bytes_sent_per_rank"], test["extra_data"]["least_bytes_per_rank"]
        for rank, (got, bound) in enumerate(zip(sent, least)):
            # gloo frames each of the few messages with ~150 bytes: more than the payload, never less
            assert bound <= got <= with_slack(bound), f"{placement}: rank {rank} counted {got}, least {bound}"
    for name in VALUES:
        assert reference[name]["status"] == "passed", reference[name]["output"]


def test_sync_sending_the_whole_model_to_every_rank_fails_only_the_bytes_check(tmp_path):
    tests = grade(tmp_path, "sync_whole_model_to_every_rank", "sync_weights and not refuses")
    public = {
        "test_sync_weights_on_two_ranks_gives_each_engine_rank_its_tp_shard",
        "test_sync_weights_colocated_on_four_ranks_gives_both_replicas_the_same_shards",
    }
    assert set(tests) == {*VALUES, *public, *(f"{BYTES}[{p}]" for p in PLACEMENTS)}
    assert_only_failing(tests, BYTES)
    assert "not whole units or the whole model" in tests[f"{BYTES}[{PLACEMENTS[1]}]"]["output"]
