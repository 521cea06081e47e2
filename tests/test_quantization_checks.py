"""Every performance check of the quantization module, both ways: the reference passes it and
a wasteful variant (tests/variants/quantization/) fails it, while passing the correctness tests
selected beside it. The counters are checked too: the reference's counted bytes equal the bound
exactly, and the operator count is not zero."""

from __future__ import annotations

import pytest
from conftest import ROOT, VARIANTS, build_variant, by_name, grade_json, module_results


@pytest.fixture(scope="module")
def reference_results(solutions_results: dict) -> dict:
    """The quantization module of the session's full grading of the solutions."""
    return module_results(solutions_results, "quantization")


def grade_variant(variant: str, select: str, tmp_path, *options: str) -> dict[str, dict]:
    submission = build_variant("quantization", variant, tmp_path / "submission")
    return by_name(grade_json(submission, "quantization", "--select", select, *options, out=tmp_path / "r.json"))


def split(tests: dict[str, dict], perf_words: str) -> tuple[dict, dict]:
    perf = {n: t for n, t in tests.items() if perf_words in n}
    return perf, {n: t for n, t in tests.items() if n not in perf}


def test_reference_passes_every_storage_and_operator_check_exactly_at_the_bound(reference_results):
    checks = {
        n: t for n, t in reference_results.items() if "bytes" in t["extra_data"] or "ops_8_rows" in t["extra_data"]
    }
    assert len(checks) == 10, sorted(checks)
    for name, test in checks.items():
        assert test["status"] == "passed", f"{name}: {test['output']}"
        data = test["extra_data"]
        if "bytes_bound" in data:
            assert data["bytes"] == data["bytes_bound"], f"{name}: counted {data['bytes']}, bound {data['bytes_bound']}"
        if "ops_8_rows" in data:
            assert 0 < data["ops_64_rows"] == data["ops_8_rows"], data


def test_reference_sqnr_figures_clear_the_floors(reference_results):
    from grader.suites.quantization.test_quantization_accuracy import FLOORS

    for (scheme, kind), floor in FLOORS.items():
        test = reference_results[f"test_sqnr_is_above_the_floor[{scheme}-{kind}]"]
        assert test["extra_data"]["sqnr_db"] >= floor + 1.5, (
            f"{scheme}/{kind}: margin under 1.5 dB: {test['extra_data']}"
        )


VARIANT_CHECKS = [
    # (variant, --select, words naming the perf check, a phrase of its failure message)
    (
        "pack_one_value_per_byte",
        "round_trips_random_values or half_a_byte_per_value",
        "half_a_byte_per_value",
        "expected ceil(n/2)",
    ),
    (
        "int4_stored_in_int8",
        "zero_is_exact or stores_no_more_than",
        "stores_no_more_than",
        "Pack 4-bit values two per byte",
    ),
    (
        "float64_scales",
        "groups_along_the_last_dimension or stores_no_more_than",
        "stores_no_more_than",
        "one float32 scale per group",
    ),
    ("nf4_one_code_per_byte", "nf4_block_of_zeros or nf4_stores", "nf4_stores", "codes plus absmax need"),
    (
        "quant_linear_keeps_float_weight",
        "quant_linear_equals or keeps_only_the_packed_weight",
        "keeps_only",
        "keep no float copy",
    ),
    (
        "w4a16_dequantize_then_matmul",
        "w4a16_kernel_matches or never_materialises",
        "never_materialises",
        "dequantize inside the kernel",
    ),
    (
        "quantize_loops_over_groups",
        "groups_along_the_last_dimension or same_operators",
        "same_operators",
        "no Python loop",
    ),
]


@pytest.mark.parametrize(
    ("variant", "select", "perf_words", "message"), VARIANT_CHECKS, ids=[v[0] for v in VARIANT_CHECKS]
)
def test_wasteful_variant_is_correct_but_fails_its_check(tmp_path, variant, select, perf_words, message):
    perf, correctness = split(grade_variant(variant, select, tmp_path), perf_words)
    assert perf and correctness, f"the selection ran {sorted(perf)} and {sorted(correctness)}"
    for name, test in correctness.items():
        assert test["status"] == "passed", f"{variant} should pass {name}: {test['output']}"
    failed = [n for n, t in perf.items() if t["status"] == "failed"]
    assert failed, f"{variant} passed every check of {sorted(perf)}"
    assert message in perf[failed[0]]["output"], perf[failed[0]]["output"]


def test_int8_storage_of_int4_counts_twice_the_data(tmp_path):
    tests = grade_variant("int4_stored_in_int8", "stores_no_more_than", tmp_path)
    test = tests["test_quantized_tensor_stores_no_more_than_data_plus_scales[int4-group128-symmetric]"]
    assert test["status"] == "failed"
    data = test["extra_data"]
    assert data["bytes"] == data["bytes_bound"] + 256 * 512 // 2, data  # one byte per value, not half


@pytest.mark.gpu
def test_w4a16_timing_check_both_ways_on_gpu(tmp_path):
    """The timed W4A16 check on a GPU: the reference passes every tier (they are set from its own
    ratio to a bf16 matmul: this fails while W4A16_REFERENCE_RATIO is too low for the kernel), and
    dequantizing the whole weight to bf16 before a matmul, still correct, misses even the partial
    tier."""
    from grader.suites.quantization.test_quantization_linear import W4A16_TIERS

    select = "w4a16_kernel"
    reference = by_name(
        grade_json(
            ROOT / "solutions", "quantization", "--select", select, "--device", "cuda", out=tmp_path / "ref.json"
        )
    )
    timed = {n: t for n, t in reference.items() if "time_against" in n}
    assert len(timed) == len(W4A16_TIERS), sorted(reference)
    assert all(t["status"] == "passed" for t in reference.values()), reference
    perf, correctness = split(
        grade_variant("w4a16_dequantize_then_matmul", select, tmp_path, "--device", "cuda"), "time_against"
    )
    assert correctness and all(t["status"] == "passed" for t in correctness.values()), correctness
    assert len(perf) == len(W4A16_TIERS) and all(t["status"] == "failed" for t in perf.values()), perf


@pytest.mark.parametrize("variant", [v[0] for v in VARIANT_CHECKS])
def test_variant_files_name_their_target(variant):
    lines = (VARIANTS / "quantization" / f"{variant}.py").read_text().splitlines()
    assert lines[0].startswith('"""') and any(line.startswith("# target: ") for line in lines[:4])
