"""Hidden suite: one training step of TinyGPT on worlds of 8 ranks, each mesh using three of the
four dimensions, against one process training the whole model on the whole batch (float64, the
course's TinyGPT and torch's cross_entropy); the 1F1B bound on micro-batches in flight; what
each group carries (probe "groups": every ProcessGroup call of a rank, bytes under the ring
conventions) against the call-by-call traffic of reference.py; and the refusals."""

from __future__ import annotations

from dataclasses import replace

import pytest

from grader.sandbox import Step
from grader.suites.parallel_4d.reference import (
    BATCH,
    CONFIG,
    LR,
    MESH_16,
    MESHES,
    MICROBATCHES,
    SEED,
    SEQ,
    coordinates,
    expected_groups,
    held_names,
    make_tokens,
    one_process_step,
    shard,
    sizes_of,
    step_4d,
    traffic,
)
from grader.testing import assert_matches, expect_exception

RUNS: dict[tuple, object] = {}
BYTES_SLACK = 64  # the loss's scalar may travel in another shape; nothing else may differ


def run(submission, mesh, order="tp-cp-dp-pp", microbatches=MICROBATCHES, salt=1):
    """One step_4d on the mesh's world, every rank under the "groups" probe (cached)."""
    key = (id(submission), mesh, order, microbatches, salt)
    if key not in RUNS:
        sizes = sizes_of(mesh)
        tokens = make_tokens(salt)
        step = Step("step_4d", (CONFIG, sizes, order, tokens, microbatches, LR, SEED), measure=("groups",))
        world = sizes["dp"] * sizes["tp"] * sizes["pp"] * sizes["cp"]
        RUNS[key] = submission.script_spmd(world, [[step]] * world)
    return RUNS[key]


def mesh_id(mesh) -> str:
    return "dp{}-tp{}-pp{}-cp{}".format(*mesh)


def check_against_one_process(result, sizes, salt, order="tp-cp-dp-pp"):
    loss, whole = one_process_step(make_tokens(salt))
    from grader.models.process_grid import ProcessGrid

    grid = ProcessGrid(tp=sizes["tp"], cp=sizes["cp"], pp=sizes["pp"], dp=sizes["dp"], order=order)
    for rank, steps in enumerate(result.steps):
        out, where = steps[0], grid.coordinates(rank)
        at = f"rank {rank} (tp {where['tp']}, cp {where['cp']}, dp {where['dp']}, pp stage {where['pp']}) of {sizes}"
        if where["pp"] == sizes["pp"] - 1:
            assert out["loss"] is not None, f"{at}: the last stage must return the loss, got None"
            assert abs(out["loss"] - loss) <= 1e-10, f"{at}: loss {out['loss']!r}, one process gets {loss!r}"
        else:
            assert out["loss"] is None, f"{at}: only the last stage returns the loss, got {out['loss']!r}"
        names = held_names(CONFIG, sizes, rank) if order == "tp-cp-dp-pp" else None
        if names is not None:
            assert sorted(out["state"]) == sorted(names), (
                f"{at}: state_dict() must hold exactly {sorted(names)}, got {sorted(out['state'])} "
                "(model.py's docstring: which blocks and embeddings a stage holds)"
            )
        for name, value in out["state"].items():
            want = shard(name, whole[name], where["tp"], sizes["tp"])
            assert_matches(value, want, f"{at}: {name} after the step (tp shard {where['tp']})", 1e-10, 1e-10)


def check_traffic(result, sizes, record_property) -> None:
    """Every call of every rank in one of its groups; bytes per group as reference.traffic counts."""
    groups = expected_groups(sizes)
    for rank, calls in enumerate(m[0]["groups"] for m in result.measurements):
        mine = {kind: next((g for g in groups[kind] if rank in g), None) for kind in groups}
        members = {tuple(g) for g in mine.values() if g is not None}
        want = traffic(CONFIG, sizes, rank, BATCH, SEQ, MICROBATCHES)
        expected = {m: sum(want[k] for k, g in mine.items() if g is not None and tuple(g) == m) for m in members}
        sent = dict.fromkeys(members, 0.0)
        for call in calls:
            if call["op"] in ("send", "recv", "recv_anysource"):
                if "peer" in call and call["peer"] not in mine["pp"]:
                    raise AssertionError(
                        f"rank {rank} of {sizes}: sends to rank {call['peer']}, outside its pp group {mine['pp']}"
                    )
                sent[tuple(mine["pp"])] += call["bytes"]
            elif tuple(call["ranks"]) in members:
                sent[tuple(call["ranks"])] += call["bytes"]
            else:
                raise AssertionError(
                    f"rank {rank} of {sizes}: {call['op']}() among ranks {call['ranks']}, none of its groups "
                    f"{mine}: gradients go over 'dp-cp', activations over 'tp', K and V over 'cp'"
                )
        record_property(f"rank_{rank}_bytes_per_group", {"/".join(map(str, g)): n for g, n in sent.items()})
        for group, got in sent.items():
            kinds = "/".join(k for k, g in mine.items() if g is not None and tuple(g) == group)
            assert abs(got - expected[group]) <= BYTES_SLACK, (
                f"rank {rank} of {sizes}: sends {got:.0f} bytes in its {kinds} group {list(group)}, the layout "
                f"needs {expected[group]:.0f} (lecture section 6: what each group carries)"
            )


@pytest.mark.points(24)
@pytest.mark.parametrize("mesh", MESHES, ids=mesh_id)
def test_one_step_on_a_world_of_8_equals_one_process(submission, mesh):
    """Loss (last stage only) and every updated shard equal one process's step on the whole
    batch; each rank holds exactly the parameters of its stage, under the whole model's names."""
    check_against_one_process(run(submission, mesh), sizes_of(mesh), 1)


@pytest.mark.points(6)
def test_one_step_on_a_world_of_16_with_every_dimension_equals_one_process_and_counts(submission):
    """dp = tp = pp = cp = 2 on 16 ranks (forked from the zygote): the step equals one process
    and every rank's groups carry what reference.traffic counts."""
    check_against_one_process(run(submission, MESH_16), sizes_of(MESH_16), 1)
    check_traffic(run(submission, MESH_16), sizes_of(MESH_16), lambda *_: None)


@pytest.mark.points(4)
def test_one_step_in_another_order_takes_coordinates_from_the_grid(submission):
    """Order "pp-dp-cp-tp" (tp outermost): the data, positions and shards follow the grid's
    coordinates, not arithmetic on the rank."""
    mesh = (2, 2, 2, 1)
    check_against_one_process(run(submission, mesh, order="pp-dp-cp-tp", salt=2), sizes_of(mesh), 2, "pp-dp-cp-tp")


@pytest.mark.points(3)
def test_a_world_of_one_rank_is_one_process(submission):
    tokens = make_tokens(3)
    result = submission.script_spmd(1, [[step_4d({"dp": 1, "tp": 1, "pp": 1, "cp": 1}, tokens, measure=())]])
    out = result.steps[0][0]
    loss, whole = one_process_step(tokens)
    assert abs(out["loss"] - loss) <= 1e-10, f"one rank: loss {out['loss']!r}, one process {loss!r}"
    for name, value in whole.items():
        assert_matches(out["state"].get(name), value, f"one rank: {name} after the step", 1e-10, 1e-10)


@pytest.mark.points(8)
def test_1f1b_holds_at_most_pp_minus_s_microbatches_on_stage_s(submission, record_property):
    """pp = 2, m = 4 micro-batches (mesh dp 1, tp 2, pp 2, cp 2): stage 0 holds at most 2 between
    forward and backward, stage 1 one (counted by hooks on the stage module); GPipe holds 4."""
    mesh, m = (1, 2, 2, 2), 4
    result = run(submission, mesh, microbatches=m, salt=4)
    check_against_one_process(result, sizes_of(mesh), 4)
    record_property("in_flight_per_rank", [steps[0]["in_flight"] for steps in result.steps])
    for rank, steps in enumerate(result.steps):
        stage = coordinates(sizes_of(mesh), rank)["pp"]
        bound = min(2 - stage, m)
        peak = steps[0]["in_flight"]
        assert peak <= bound, (
            f"rank {rank}, stage {stage}: {peak} micro-batches had run forward and not yet backward at "
            f"once; 1F1B holds at most pp - s = {bound} (step.py's train_step docstring)"
        )


@pytest.mark.perf
@pytest.mark.points(12)
@pytest.mark.parametrize("mesh", MESHES, ids=mesh_id)
def test_each_group_carries_what_the_layout_needs_and_nothing_crosses_into_other_groups(
    submission, mesh, record_property
):
    """Every collective of a rank runs in one of its own groups (never the world, unless the
    world is one of them); a point-to-point send goes to a rank of its pp group (any group may
    carry it). Bytes sent per group (ring conventions; kinds with the same members, such as "dp"
    and "dp-cp" when cp = 1, add up) equal reference.traffic's call-by-call count within
    BYTES_SLACK."""
    check_traffic(run(submission, mesh), sizes_of(mesh), record_property)


@pytest.mark.points(3)
@pytest.mark.parametrize(
    "microbatches, tokens",
    [(3, make_tokens(5)), (2, make_tokens(5, seq=7))],
    ids=["dp-times-m-not-dividing-the-batch", "cp-not-dividing-the-sequence"],
)
def test_train_step_refuses_a_batch_that_does_not_split(submission, microbatches, tokens):
    sizes = {"dp": 2, "tp": 1, "pp": 2, "cp": 2}
    step = step_4d(sizes, tokens, microbatches, measure=())
    expect_exception("ValueError", lambda: submission.script_spmd(8, [[step]] * 8))


@pytest.mark.points(2)
def test_parallelize_refuses_pp_not_dividing_the_layers(submission):
    sizes = {"dp": 1, "tp": 1, "pp": 8, "cp": 1}  # 4 layers over 8 stages
    step = step_4d(sizes, make_tokens(6), 8, measure=())
    expect_exception("ValueError", lambda: submission.script_spmd(8, [[step]] * 8))


@pytest.mark.points(2)
@pytest.mark.parametrize(
    "config",
    [replace(CONFIG, num_kv_heads=2), replace(CONFIG, num_kv_heads=4, vocab_size=18)],
    ids=["kv-heads", "vocab"],
)
def test_parallelize_refuses_tp_not_dividing_the_kv_heads_or_the_vocabulary(submission, config):
    """tp = 4 on 4 ranks: 2 KV heads do not split; tp = 4 and a vocabulary of 18 rows do not split."""
    sizes = {"dp": 1, "tp": 4, "pp": 1, "cp": 1}
    step = Step("step_4d", (config, sizes, "tp-cp-dp-pp", make_tokens(7), 1, LR, SEED))
    expect_exception("ValueError", lambda: submission.script_spmd(4, [[step]] * 4))
