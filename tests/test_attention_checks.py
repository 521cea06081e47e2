"""The attention module's checks, both ways: the reference passes the counted-memory check of
flash_attention_torch (and the probe sees at least the inputs, so it is not blind); wasteful
variants that are still correct fail it; calling SDPA inside the exercise is refused.

The GPU timing check (grader/suites/attention/test_attention_gpu.py, time against SDPA, in tiers
set from the reference's own ratio) is proved both ways by the last test here, which needs a CUDA
device: `make gpu-check` runs it."""

from __future__ import annotations

import pytest
from conftest import ROOT, build_variant, by_name, grade_json, grade_variant, module_results

MEMORY = "test_flash_attention_torch_never_materialises_the_score_matrix"
CASES = {  # parametrization id -> (B*H*N*d of the inputs, B*H*Nq*Nk of the scores, B*H*64*Nk of a tile row)
    "mha-full-q1024-k1024-d16-float32": (2 * 1024 * 16, 2 * 1024 * 1024, 2 * 64 * 1024),
    "mqa-causal-q512-k512-d16-float32": (4 * 512 * 16, 4 * 512 * 512, 4 * 64 * 512),
}
CORRECT = "test_flash_attention_torch_forward_and_lse or test_flash_attention_torch_gradients"


def _memory_tests(tests: dict) -> dict[str, dict]:
    return {name.split("[")[1].rstrip("]"): test for name, test in tests.items() if name.startswith(MEMORY)}


def test_reference_passes_the_memory_check_and_the_probe_counts_the_inputs(solutions_results):
    memory = _memory_tests(module_results(solutions_results, "attention"))
    assert set(memory) == set(CASES)
    for case, test in memory.items():
        assert test["status"] == "passed", test["output"]
        inputs, scores, _ = CASES[case]
        assert inputs <= test["extra_data"]["largest_elements"] <= test["extra_data"]["allowed_elements"] < scores


def _grade_variant(variant: str, tmp_path) -> dict[str, dict]:
    submission = build_variant("attention", variant, tmp_path / "submission")
    select = f"never_materialises or {CORRECT}"
    return by_name(grade_json(submission, "attention", "--select", select, out=tmp_path / "r.json"))


def test_materialising_flash_is_correct_but_fails_the_memory_check(tmp_path):
    tests = _grade_variant("materialising_flash", tmp_path)
    correct = {name: t for name, t in tests.items() if not name.startswith(MEMORY)}
    assert correct and all(t["status"] == "passed" for t in correct.values()), correct
    for case, test in _memory_tests(tests).items():
        assert test["status"] == "failed", case
        assert test["extra_data"]["largest_elements"] >= CASES[case][1], test["extra_data"]
        assert "the full score matrix has" in test["output"], test["output"]


def test_a_row_of_tiles_is_correct_but_fails_the_memory_check(tmp_path):
    tests = _grade_variant("tile_row", tmp_path)
    assert all(t["status"] == "passed" for name, t in tests.items() if not name.startswith(MEMORY))
    for case, test in _memory_tests(tests).items():
        assert test["status"] == "failed", case
        assert test["extra_data"]["largest_elements"] == CASES[case][2], test["extra_data"]


MLA_FLOPS = "test_mla_absorbed_forward_never_forms_k_or_v"


def test_mla_reference_passes_the_absorbed_flops_check_at_the_latent_rate(solutions_results):
    test = module_results(solutions_results, "attention")[MLA_FLOPS]
    assert test["status"] == "passed", test["output"]
    assert test["extra_data"]["flops_per_seq_squared"] == 4 * 2 * 4, test["extra_data"]  # 4 * heads * latent


def test_mla_rebuilding_k_and_v_is_correct_but_fails_the_absorbed_flops_check(tmp_path):
    tests = grade_variant("attention", tmp_path, "mla_absorbed_rebuilds_kv", "mla_absorbed_forward")
    correct = {name: t for name, t in tests.items() if not name.startswith(MLA_FLOPS)}
    assert correct and all(t["status"] == "passed" for t in correct.values()), correct
    assert tests[MLA_FLOPS]["status"] == "failed", tests[MLA_FLOPS]
    assert tests[MLA_FLOPS]["extra_data"]["flops_per_seq_squared"] == 4 * 2 * 32, tests[MLA_FLOPS]["extra_data"]
    assert "fold W_uk into the query" in tests[MLA_FLOPS]["output"]


def test_sdpa_inside_flash_attention_torch_is_refused(tmp_path):
    submission = build_variant("attention", "sdpa_inside", tmp_path / "submission")
    select = "test_flash_attention_torch_forward_and_lse or test_attention_matches_sdpa"
    tests = by_name(grade_json(submission, "attention", "--select", select, out=tmp_path / "r.json"))
    for name, test in tests.items():
        if name.startswith("test_attention_matches_sdpa"):
            assert test["status"] == "passed", f"{name}: {test['output']}"
        else:
            assert test["status"] == "failed", name
            assert test["extra_data"]["kind"] == "forbidden", test["output"]
            assert "scaled_dot_product_attention" in test["output"], test["output"]


@pytest.mark.gpu
def test_triton_time_check_passes_the_reference_and_fails_small_tiles_on_gpu(tmp_path):
    """Against torch's scaled_dot_product_attention, same run: the reference passes every tier in
    both modes (its tiers are set from its own ratio: this fails while REFERENCE_RATIO is too low
    for the kernels), and the leaderboard configuration; the 16 x 16-tile variant is still correct
    but misses even the partial tier."""
    from grader.suites.attention.test_attention_gpu import PARTIAL, TIERS

    select = "time_against_sdpa or leaderboard_configuration"
    reference = by_name(
        grade_json(
            ROOT / "solutions", "attention", "--select", select, "--device", "cuda", out=tmp_path / "reference.json"
        )
    )
    assert len(reference) == 2 * len(TIERS) + 1, sorted(reference)
    assert all(t["status"] == "passed" for t in reference.values()), reference
    submission = build_variant("attention", "small_tiles_triton", tmp_path / "submission")
    select = f"(time_against_sdpa and within_{PARTIAL:g}x) or flash_attention_triton_matches_sdpa_on_the_gpu"
    variant = by_name(
        grade_json(submission, "attention", "--select", select, "--device", "cuda", out=tmp_path / "variant.json")
    )
    timed = {n: t for n, t in variant.items() if "time_against_sdpa" in n}
    correct = {n: t for n, t in variant.items() if n not in timed}
    assert correct and all(t["status"] == "passed" for t in correct.values()), correct
    assert len(timed) == 2 and all(t["status"] == "failed" for t in timed.values()), timed
