"""Public tests for the reliability module: run them while you work with

    pytest assignments/reliability          (add -s to see what your code prints)

Your functions run in worker processes, never inside pytest. Checkpoints are written to a
temporary folder and read back by torch.distributed.checkpoint (DCP) itself, in this process;
train_with_restarts runs here on a world of 2 ranks already joined, called again as after a
restart (the hidden suite runs it under torchrun and kills a worker); the flight-recorder dumps
are real, recorded from small gloo jobs by grader.models.flight_recorder.record_dumps (read its
docstring for the jobs and the format). The hidden suite checks the interval formulas against
Young's and Daly's closed forms and a simulation of failures, straggler on tables whose answer
the docstring fixes, step_breakdown on built traces and on real profiler traces of a
data-parallel step, resharding from 4 ranks to 2 and 3 and back, DCP reading your checkpoints
and you reading DCP's, the bytes each rank writes, the async checkpoint's snapshot and how long
it holds training against DCP's synchronous save, diagnose against torch's flight-recorder
analyzer on real dumps of broken jobs, the Kubernetes manifests against the official client's
models and as a real torchrun world, and every refusal. (Your manifests.py is named so that
`import kubernetes` still finds the official client.) `make grade` gives the score.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.run import get_args_parser, parse_min_max_nnodes

from grader.models.flight_recorder import record_dumps
from grader.sandbox import Group, scratch  # scratch: imported before any worker starts, so they can read its folders
from grader.testing import assert_matches


def test_youngs_interval_for_llama3s_mtbf(submission):
    """Llama 3: 419 unexpected interruptions in 54 days on 16,384 GPUs, a job MTBF of 3.09 h."""
    mtbf = submission.function("job_mtbf_s")(16384, 16384 * 54 * 86400 / 419)
    interval = submission.function("optimal_checkpoint_interval")(60.0, mtbf, "young")
    assert math.isclose(interval, math.sqrt(2 * 60.0 * 54 * 86400 / 419)), (
        f"with 60 s checkpoints and a job MTBF of {mtbf:.0f} s, Young's interval is sqrt(2 delta M) = "
        f"{math.sqrt(2 * 60.0 * 54 * 86400 / 419):.0f} s; got {interval}"
    )


def test_goodput_with_one_mtbf_of_work_between_checkpoints(submission):
    """8 GPUs failing once every 8,000 s each: a job MTBF M of 1,000 s. With tau + delta = M, Daly's
    T_w / T_s is M e^(R/M) (e - 1) / tau; a restart of R = M ln 2 doubles it."""
    goodput = submission.function("goodput")
    e = math.e
    cases = [  # (checkpoint_s, restart_s, interval_s), expected goodput
        ((0.0, 0.0, 1000.0), 1 / (e - 1)),  # free checkpoints and restarts: still 42 % lost to failures
        ((100.0, 0.0, 900.0), 0.9 / (e - 1)),
        ((100.0, 1000.0 * math.log(2), 900.0), 0.9 / (2 * (e - 1))),
    ]
    for (delta, restart, tau), want in cases:
        got = goodput(8, 8000.0, delta, restart, tau)
        assert math.isclose(got, want, rel_tol=1e-9), (
            f"goodput(8, 8000.0, checkpoint_s={delta}, restart_s={restart:.1f}, interval_s={tau}): expected "
            f"{want:.6f} = tau / (M e^(R/M) (e^((tau + delta)/M) - 1)) with M = 1000 s, got {got!r}"
        )


def test_a_rank_that_skips_an_all_reduce_is_named(submission):
    """Rank 3 skips the world's 3rd all_reduce, its 4th collective; ranks 0, 1, 2 hang in it."""
    got = submission.function("diagnose")(record_dumps("skip_all_reduce"))
    want = {"status": "missing", "process_group": ("0", "default_pg"), "seq": 4, "op": "gloo:all_reduce", "ranks": [3]}
    assert isinstance(got, dict), f"diagnose returns a dict, got {got!r}"
    got = dict(got, process_group=tuple(got.get("process_group") or ()) or None)
    assert got == want, f"job 'skip_all_reduce': expected {want}, got {got} (see diagnose's docstring)"


def test_a_job_whose_ranks_all_agree_is_ok(submission):
    got = submission.function("diagnose")(record_dumps("healthy"))
    want = {"status": "ok", "process_group": None, "seq": None, "op": None, "ranks": []}
    assert got == want, f"job 'healthy' (every rank issued the same collectives): expected {want}, got {got!r}"


def test_the_straggler_is_the_rank_that_waits_least(submission):
    step_times = [[1.0, 1.0, 1.0]] * 4  # a synchronous job: every step lasts as long as the slowest rank
    wait_times = [[0.5, 0.5, 0.5], [0.5, 0.45, 0.5], [0.05, 0.0, 0.02], [0.5, 0.5, 0.55]]
    got = submission.function("straggler")(step_times, wait_times)
    assert got == 2, f"rank 2 computes 0.95 s a step while the others compute about 0.5 s: expected 2, got {got!r}"


def test_a_step_trace_splits_into_compute_exposed_communication_and_idle(submission):
    """Microseconds: compute 0-100 with a nested operator, an all-reduce 60-150 on gloo's thread
    (half hidden under compute), nothing 150-170, compute 170-200."""
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::linear", "ts": 0, "dur": 100, "pid": 1, "tid": 1},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 10, "dur": 50, "pid": 1, "tid": 1},
        {"ph": "X", "cat": "user_annotation", "name": "gloo:all_reduce", "ts": 60, "dur": 90, "pid": 1, "tid": 2},
        {"ph": "X", "cat": "cpu_op", "name": "aten::add_", "ts": 170, "dur": 30, "pid": 1, "tid": 1},
    ]
    got = submission.function("step_breakdown")({"traceEvents": events})
    want = {"step_s": 200e-6, "compute_s": 130e-6, "communication_s": 90e-6, "exposed_communication_s": 50e-6,
            "idle_s": 20e-6}  # fmt: skip
    assert isinstance(got, dict) and all(math.isclose(got[k], v, abs_tol=1e-12) for k, v in want.items()), (
        f"expected {want}, got {got} (unions of intervals, in seconds: see step_breakdown's docstring)"
    )


def test_a_checkpoint_saved_by_two_ranks_loads_on_one_and_in_dcp(submission):
    with scratch.folder("public-") as folder:
        _save_on_two_and_load(submission, folder)


def _save_on_two_and_load(submission, tmp_path):
    full = {"w": torch.randn(5, 3, dtype=torch.float64), "b": torch.randn(5, dtype=torch.float64)}
    states = [{name: t[:3] for name, t in full.items()}, {name: t[3:] for name, t in full.items()}]  # blocks of 3
    submission.function("save_sharded").spmd(2, [(state, str(tmp_path)) for state in states])
    loaded = submission.function("load_resharded")(
        {name: torch.zeros_like(t) for name, t in full.items()}, str(tmp_path)
    )
    read_by_dcp = {name: torch.zeros_like(t) for name, t in full.items()}
    dcp.load(read_by_dcp, checkpoint_id=str(tmp_path))  # one process: DCP reads the whole tensors
    for name, tensor in full.items():
        assert_matches(loaded[name], tensor, f"load_resharded on one rank, {name!r}")
        assert_matches(read_by_dcp[name], tensor, f"dcp.load of your checkpoint, {name!r}")


def test_two_subgroups_of_a_world_of_four_each_save_their_own_checkpoint(submission):
    with scratch.folder("public-") as folder:
        _save_in_two_subgroups(submission, folder)


def _save_in_two_subgroups(submission, tmp_path):
    """Ranks {0, 2} and {1, 3} save at the same time, each group its own state to its own folder:
    in each group, global rank 2 or 3 is group rank 1 (dist.get_rank(group))."""
    groups = [(0, 2), (1, 3)]
    fulls = [{"w": torch.arange(10.0).reshape(5, 2) + 100 * i} for i in range(2)]
    args: list[tuple] = [()] * 4
    for i, members in enumerate(groups):
        for local, rows in enumerate((slice(0, 3), slice(3, 5))):  # blocks of 3 rows
            args[members[local]] = ({"w": fulls[i]["w"][rows]}, str(tmp_path / f"group{i}"), Group(members))
    submission.function("save_sharded").spmd(4, args)
    for i, members in enumerate(groups):
        files = sorted(path.name for path in (tmp_path / f"group{i}").iterdir())
        assert files == [".metadata", "__0_0.distcp", "__1_0.distcp"], (
            f"the checkpoint of Group({members}) holds {files}: expected the shards of group ranks 0 and 1 "
            f"(write_shard with the rank in the group, not the global rank) and the .metadata of group rank 0"
        )
        read_by_dcp = {"w": torch.zeros(5, 2)}
        dcp.load(read_by_dcp, checkpoint_id=str(tmp_path / f"group{i}"))
        assert_matches(read_by_dcp["w"], fulls[i]["w"], f"dcp.load of the checkpoint of Group({members})")


def test_the_async_checkpoint_holds_the_state_at_the_save(submission):
    with scratch.folder("public-") as folder:
        _train_and_read_back(submission, folder)


def _train_and_read_back(submission, tmp_path):
    state = {"w": torch.zeros(4, 2)}
    result = submission.function("train_and_checkpoint")(state, str(tmp_path), 5, [1], "async")
    saved = {"w": torch.zeros(4, 2)}
    dcp.load(saved, checkpoint_id=str(tmp_path / "step1"))
    assert_matches(saved["w"], torch.full((4, 2), 2.0), "the checkpoint after step 1 (the state as save() saw it)")
    assert_matches(result["state"]["w"], torch.full((4, 2), 5.0), "the state after 5 steps")


def test_a_run_resumed_from_its_checkpoint_ends_as_one_never_interrupted(submission):
    with scratch.folder("public-") as folder:
        _resume_and_compare(submission, folder)


def _resume_and_compare(submission, tmp_path):
    """Without torchrun: a world of 2 ranks already joined trains 2 steps (checkpoint of step 2),
    then a new call, as after a restart, asks for 4 steps in the same folder; it must resume at
    step 2. `make grade` runs the real thing: torchrun, and a worker killed mid-run."""
    train = submission.function("train_with_restarts")
    interrupted, whole = tmp_path / "interrupted", tmp_path / "whole"
    interrupted.mkdir()
    whole.mkdir()
    train.spmd(2, [(str(interrupted), 2, 2)] * 2)
    first = (interrupted / "step_000002.pt").stat()
    resumed = train.spmd(2, [(str(interrupted), 4, 2)] * 2).outputs[0]
    again = (interrupted / "step_000002.pt").stat()
    rewritten = (again.st_ino, again.st_mtime_ns) != (first.st_ino, first.st_mtime_ns)
    assert not rewritten, (
        "the resumed run wrote step_000002.pt again: it must start from the checkpoint's next_step (2), "
        "not redo steps 0 and 1"
    )
    never_interrupted = train.spmd(2, [(str(whole), 4, 2)] * 2).outputs[0]
    differ = [name for name, t in never_interrupted.items() if name not in resumed or not torch.equal(resumed[name], t)]
    assert not differ, (
        f"{differ} after 2 + 2 steps differ from the run of 4 steps never interrupted (bit for bit, float64): "
        "the checkpoint must hold the model, the optimizer's state (momentum) and next_step"
    )


def test_an_indexed_job_of_one_pod_per_node_behind_a_headless_service(submission):
    service, job = submission.function("torchrun_job")("demo", "img", 2, 8, ["train.py"])
    assert (service["kind"], service["spec"]["clusterIP"]) == ("Service", "None"), (
        f"expected a headless Service first (clusterIP 'None'), got {service.get('kind')!r} "
        f"with clusterIP {service.get('spec', {}).get('clusterIP')!r}"
    )
    spec = job["spec"]
    got = (spec.get("completionMode"), spec.get("completions"), spec.get("parallelism"))
    assert got == ("Indexed", 2, 2), f"(completionMode, completions, parallelism) = {got}, expected ('Indexed', 2, 2)"
    assert spec["template"]["spec"].get("subdomain") == "demo", (
        "the pod template's subdomain must name the Service ('demo'): that is what gives pod 0 its DNS name"
    )


def test_every_pod_runs_torchrun_with_a_rendezvous_at_pod_zero(submission):
    _, job = submission.function("torchrun_job")("demo", "img", 2, 8, ["train.py", "--steps=3"], 2, 29400, "ml")
    container = job["spec"]["template"]["spec"]["containers"][0]
    command = container["command"]
    assert command[0] == "torchrun", f"the container must run torchrun itself (no shell), got {command!r}"
    args = get_args_parser().parse_args(command[1:])  # torchrun's own reading of the command
    nnodes = parse_min_max_nnodes(args.nnodes)  # "2" or "2:2"
    got = (nnodes, args.nproc_per_node, args.rdzv_backend, args.rdzv_endpoint, args.rdzv_id, args.max_restarts)
    want = ((2, 2), "8", "c10d", "demo-0.demo.ml.svc.cluster.local:29400", "demo", 2)
    assert got == want, (
        f"(nnodes min:max, nproc-per-node, rdzv-backend, rdzv-endpoint, rdzv-id, max-restarts): {got}, expected {want}"
    )
    assert [args.training_script, *args.training_script_args] == ["train.py", "--steps=3"], command
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "8", (
        f"expected resources.limits['nvidia.com/gpu'] == '8' (a quantity: a string), got {container['resources']!r}"
    )
