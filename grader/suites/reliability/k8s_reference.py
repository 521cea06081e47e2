"""The hidden suite's view of a torchrun job's manifests, written apart from the solution.

Three layers, each usable on its own:

1. Schema: each manifest is loaded with the official Kubernetes Python client's model for its
   kind (`V1Service.from_dict`, `V1Job.from_dict`: pydantic models that refuse a wrong type or
   a missing required field). `from_dict` silently drops a key it does not know, so the model
   is written back with `ApiClient().sanitize_for_serialization` (the API's camelCase names)
   and compared with the input: a key that did not come back is misspelled or unknown to the
   API, a value that came back different was coerced.
2. Semantics: what the kubelet and the Job controller would do with the manifests, emulated
   here: the environment of pod i (JOB_COMPLETION_INDEX, which the Job controller adds, and the
   container's `env`, with the downward API's completion-index annotation or label resolved),
   `$(VAR)` expansion in command and args, and the torchrun command read with torchrun's own
   argument parser (torch.distributed.run.get_args_parser).
3. A local cluster: every pod of the Job as a local `python -m torch.distributed.run` process
   group; they must form one c10d world over localhost and finish an all-reduce.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

from grader import system

CLUSTER_DOMAIN = "cluster.local"
GPU_RESOURCE = "nvidia.com/gpu"
INDEX_KEY = "batch.kubernetes.io/job-completion-index"
# Labels the Job controller puts on every pod of a Job named n (Kubernetes >= 1.27 sets both).
JOB_POD_LABELS = ("batch.kubernetes.io/job-name", "job-name")
SCHEMA = {("v1", "Service"): "V1Service", ("batch/v1", "Job"): "V1Job"}
# torchrun options the docstring names (argparse dest); every other one must keep its default.
TORCHRUN_OPTIONS = {"nnodes", "nproc_per_node", "rdzv_backend", "rdzv_endpoint", "rdzv_id", "max_restarts"}
# Tolerated beyond the docstring: --node-rank equal to the pod's completion index (torchrun ignores
# it with c10d, so it changes nothing).
TOLERATED = {"node_rank"}

# ---------------------------------------------------------------------------------------------
# 1. Schema
# ---------------------------------------------------------------------------------------------


def schema_problems(manifest: object, where: str = "manifest") -> list[str]:
    """Reasons the official client's model for `manifest`'s kind refuses it or does not give it
    back unchanged; [] when it loads and round-trips exactly."""
    if not isinstance(manifest, dict):
        return [f"{where}: expected a dict, got {type(manifest).__name__}"]
    key = (manifest.get("apiVersion"), manifest.get("kind"))
    if key not in SCHEMA:
        known = ", ".join(f"{k} {v}" for v, k in SCHEMA)
        return [f"{where}: apiVersion {key[0]!r} and kind {key[1]!r} are not one of {known}"]
    from kubernetes import client

    model_name = SCHEMA[key]
    try:
        model = load_model(manifest, model_name)
    except Exception as error:  # a wrong type, a missing required field, a list where a dict belongs
        return [f"{where}: the Kubernetes client's {model_name} refuses it: {_describe(error)}"]
    back = client.ApiClient().sanitize_for_serialization(model)
    return [f"{where}: {problem}" for problem in differences(manifest, back)]


def load_model(manifest: dict, model_name: str) -> Any:
    """`manifest` as the official client's model `model_name` ("V1Job"). kubernetes >= 37 has
    pydantic models with a public from_dict (strict types, required fields); older releases are
    read the way the client reads an API server's answer (ApiClient's own deserializer, which
    checks required fields and converts primitives, so a coercion shows in the round trip)."""
    from kubernetes import client

    model = getattr(client, model_name)
    if callable(getattr(model, "from_dict", None)):
        return model.from_dict(manifest)
    return client.ApiClient()._ApiClient__deserialize(manifest, model_name)


def _describe(error: Exception) -> str:
    if not callable(getattr(error, "errors", None)) or not hasattr(error, "title"):  # not pydantic's
        return f"{type(error).__name__}: {error}"
    parts = []
    for item in error.errors()[:3]:
        location = ".".join(str(part) for part in item["loc"])
        parts.append(f"{error.title}{'.' if location else ''}{location}: {item['msg']} (got {item.get('input')!r})")
    more = f" (and {error.error_count() - 3} more)" if error.error_count() > 3 else ""
    return "; ".join(parts) + more


def differences(given: Any, back: Any, path: str = "") -> list[str]:
    """Where `back` (the client's round trip) differs from `given`: dropped keys, coerced values."""
    here = path or "the top level"
    if isinstance(given, dict):
        if not isinstance(back, dict):
            return [f"{here} is a mapping, the schema's {type(back).__name__} there"]
        problems = []
        for key, value in given.items():
            inner = f"{path}.{key}" if path else str(key)
            if value is None:
                continue  # null is absence, in YAML and in the API
            if key not in back:
                problems.append(
                    f"field {inner!r} is not in the schema (the client dropped it): misspelled, or not the "
                    "API's camelCase name (e.g. clusterIP, completionMode, restartPolicy)?"
                )
            else:
                problems += differences(value, back[key], inner)
        return problems
    if isinstance(given, (list, tuple)):
        if not isinstance(back, (list, tuple)) or len(back) != len(given):
            return [f"{here}: {given!r} came back as {back!r}"]
        return [p for i, (g, b) in enumerate(zip(given, back)) for p in differences(g, b, f"{path}[{i}]")]
    if type(given) is not type(back) or given != back:
        return [f"{here} = {given!r} ({type(given).__name__}) came back from the schema as {back!r}"]
    return []


# ---------------------------------------------------------------------------------------------
# 2. Semantics
# ---------------------------------------------------------------------------------------------


def by_kind(manifests: object, kind: str) -> dict:
    """The one manifest of `kind`; AssertionError when there is not exactly one."""
    found = (
        [m for m in manifests if isinstance(m, dict) and m.get("kind") == kind] if isinstance(manifests, list) else []
    )
    assert len(found) == 1, f"expected exactly one {kind} among the manifests, found {len(found)}"
    return found[0]


def dig(manifest: Any, path: str, default: Any = None) -> Any:
    """manifest["a"]["b"][0]... for path "a.b.0"; `default` where the path does not exist."""
    value = manifest
    for part in path.split("."):
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return default
    return value


def pod_dns_name(job: dict, index: int) -> str:
    """The DNS name Kubernetes gives pod `index` of an Indexed Job: hostname <job>-<index>,
    under the pod template's subdomain (a headless Service) in the Job's namespace."""
    name = dig(job, "metadata.name")
    namespace = dig(job, "metadata.namespace") or "default"
    subdomain = dig(job, "spec.template.spec.subdomain")
    return f"{name}-{index}.{subdomain}.{namespace}.svc.{CLUSTER_DOMAIN}"


def pod_labels(job: dict) -> dict[str, str]:
    """Labels every pod of the Job carries: the template's and those the Job controller adds."""
    name = dig(job, "metadata.name")
    labels = dict(dig(job, "spec.template.metadata.labels") or {})
    labels.update({label: name for label in JOB_POD_LABELS})
    return labels


def the_container(job: dict) -> dict:
    containers = dig(job, "spec.template.spec.containers") or []
    assert isinstance(containers, list) and len(containers) == 1, (
        f"the pod template must have exactly one container (spec.template.spec.containers), got {len(containers)}"
    )
    return containers[0]


def expand(text: str, env: dict[str, str]) -> str:
    """The kubelet's expansion of command and args: $(VAR) is VAR's value when the container's
    environment defines it (left as written otherwise), $$ is a literal $."""
    out, i = [], 0
    while i < len(text):
        if text.startswith("$$", i):
            out.append("$")
            i += 2
        elif text.startswith("$(", i) and ")" in text[i + 2 :]:
            end = text.index(")", i + 2)
            var = text[i + 2 : end]
            out.append(env.get(var, text[i : end + 1]))
            i = end + 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


_INDEX_FIELDS = {f"metadata.annotations['{INDEX_KEY}']", f"metadata.labels['{INDEX_KEY}']"}


def pod_env(job: dict, index: int) -> dict[str, str]:
    """The container's environment in pod `index` as far as the manifest decides it:
    JOB_COMPLETION_INDEX (added by the Job controller to every container of an Indexed Job),
    then `env` in order, `value`s expanded, the completion index's downward-API fields resolved
    (other valueFrom sources are left undefined)."""
    env = {"JOB_COMPLETION_INDEX": str(index)}
    for item in the_container(job).get("env") or []:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            continue
        if isinstance(item.get("value"), str):
            env[item["name"]] = expand(item["value"], env)
        elif dig(item, "valueFrom.fieldRef.fieldPath") in _INDEX_FIELDS:
            env[item["name"]] = str(index)
    return env


def pod_argv(job: dict, index: int) -> list[str]:
    """What pod `index`'s container executes: command + args, each $(VAR)-expanded."""
    container = the_container(job)
    argv = list(container.get("command") or []) + list(container.get("args") or [])
    assert argv and all(isinstance(a, str) for a in argv), (
        f"the container's command (+ args) must be a non-empty list of strings, got {argv!r}"
    )
    env = pod_env(job, index)
    return [expand(a, env) for a in argv]


@contextlib.contextmanager
def _without_pet_environment():
    """torchrun's parser takes defaults from PET_* variables at construction: hide the grader's."""
    saved = {k: os.environ.pop(k) for k in list(os.environ) if k.startswith("PET_")}
    try:
        yield
    finally:
        os.environ.update(saved)


def parse_torchrun(argv: list[str]) -> argparse.Namespace:
    """`argv` (["torchrun", options..., script, args...]) read by torchrun's own parser;
    AssertionError with torchrun's message when it does not parse."""
    from torch.distributed.run import get_args_parser

    assert argv and argv[0] == "torchrun", (
        f"the container must run torchrun directly (command[0] == 'torchrun', no shell), got {argv[:3]!r}"
    )
    with _without_pet_environment():
        parser = get_args_parser()
        stderr = io.StringIO()
        try:
            with contextlib.redirect_stderr(stderr):
                return parser.parse_args(argv[1:])
        except SystemExit:
            message = stderr.getvalue().strip().splitlines()
            raise AssertionError(f"torchrun cannot parse {argv!r}: {message[-1] if message else 'error'}") from None


def torchrun_defaults() -> dict[str, Any]:
    from torch.distributed.run import get_args_parser

    with _without_pet_environment():
        return vars(get_args_parser().parse_args(["script.py"]))


def torchrun_problems(
    job: dict, index: int, *, nodes: int, nproc: int, endpoint: str, rdzv_id: str, max_restarts: int, command: list[str]
) -> list[str]:
    """Every way pod `index`'s torchrun command differs from the docstring's (via torchrun's parser)."""
    from torch.distributed.run import parse_min_max_nnodes

    argv = pod_argv(job, index)
    args = parse_torchrun(argv)
    problems = []
    try:
        span = parse_min_max_nnodes(args.nnodes)
    except (ValueError, RuntimeError):
        span = args.nnodes
    if span != (nodes, nodes):
        problems.append(f"--nnodes={args.nnodes}, expected {nodes} (a fixed size: the Job's completions)")
    if str(args.nproc_per_node) != str(nproc):
        problems.append(f"--nproc-per-node={args.nproc_per_node}, expected {nproc}")
    if args.rdzv_backend != "c10d":
        problems.append(f"--rdzv-backend={args.rdzv_backend}, expected c10d")
    if args.rdzv_endpoint != endpoint:
        problems.append(f"--rdzv-endpoint={args.rdzv_endpoint!r}, expected {endpoint!r}")
    if args.rdzv_id != rdzv_id:
        problems.append(f"--rdzv-id={args.rdzv_id!r}, expected {rdzv_id!r}")
    if args.max_restarts != max_restarts:
        problems.append(f"--max-restarts={args.max_restarts}, expected {max_restarts}")
    if [args.training_script, *args.training_script_args] != list(command):
        got = [args.training_script, *args.training_script_args]
        problems.append(f"torchrun runs {got!r}, expected the given command {list(command)!r} after the options")
    defaults = torchrun_defaults()
    if args.node_rank not in (defaults["node_rank"], index):
        problems.append(f"--node-rank={args.node_rank} in pod {index} (c10d ignores it; if given it must be {index})")
    for dest, value in sorted(vars(args).items()):
        if dest in TORCHRUN_OPTIONS | TOLERATED or dest in ("training_script", "training_script_args"):
            continue
        if value != defaults.get(dest):
            problems.append(f"torchrun option {dest}={value!r} is set; the docstring's command sets no other option")
    return [f"pod {index}: {p} (command {argv!r})" for p in problems]


def gpu_quantity(job: dict, where: str) -> Any:
    return (the_container(job).get("resources") or {}).get(where, {}).get(GPU_RESOURCE)


# ---------------------------------------------------------------------------------------------
# 3. A local cluster
# ---------------------------------------------------------------------------------------------

TRAIN_SCRIPT = """\
import json, os, torch, torch.distributed as dist
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
value = torch.tensor([float(rank + 1)])
dist.all_reduce(value)
record = {"rank": rank, "world_size": world, "sum": value.item(), "group_rank": int(os.environ["GROUP_RANK"]),
          "pod": int(os.environ["JOB_COMPLETION_INDEX"]), "restart": int(os.environ["TORCHELASTIC_RESTART_COUNT"])}
path = os.path.join(os.environ["LOCAL_WORLD_OUT"], f"rank-{rank}.json")
with open(path + ".tmp", "w") as f:
    json.dump(record, f)
os.replace(path + ".tmp", path)
dist.destroy_process_group()
"""

# Variables of the grader's own environment that would steer torchrun or its workers.
_HIDDEN = ("PET_", "TORCHELASTIC_", "MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "GROUP_RANK")


@dataclass
class LocalWorld:
    ok: bool
    message: str
    seconds: float
    ranks: list[dict] = field(default_factory=list)
    logs: dict[int, str] = field(default_factory=dict)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_local_world(manifests: list[dict], command: list[str], timeout_s: float = 60.0) -> LocalWorld:
    """Run every pod of the manifests' Job as local processes and report whether they formed one
    torchrun world that finished an all-reduce.

    Pod i runs `python -m torch.distributed.run` (torchrun, from the grader's interpreter) with
    the options its manifest gives, read by torchrun's parser after $(VAR) expansion with
    JOB_COMPLETION_INDEX=i, changed only where a laptop is not a cluster: the rendezvous
    endpoint must be pod 0's DNS name and is replaced by 127.0.0.1 on a free port (the
    manifest's port may be taken here); --nproc-per-node is 1 (no GPUs here, so the world has
    one worker per pod); --local-addr=127.0.0.1 stands for the pod's own DNS name. The training
    script named by `command` is replaced by the grader's own (one gloo all-reduce, one JSON
    record per rank). Only the options the docstring names are passed on, and the manifest's
    `env` serves the expansion only: nothing else the manifest says is executed here.
    Everything is killed after `timeout_s`.
    """
    start = time.monotonic()
    try:
        job = by_kind(manifests, "Job")
        nodes = dig(job, "spec.completions")
        assert isinstance(nodes, int) and nodes >= 1, f"spec.completions must be a count of pods, got {nodes!r}"
        parsed = []
        for index in range(nodes):
            args = parse_torchrun(pod_argv(job, index))
            assert [args.training_script, *args.training_script_args] == list(command), (
                f"pod {index} runs {[args.training_script, *args.training_script_args]!r}, not the command {command!r}"
            )
            assert args.rdzv_backend == "c10d", (
                f"pod {index}: --rdzv-backend={args.rdzv_backend}, the docstring's is c10d"
            )
            host, _, _ = str(args.rdzv_endpoint).rpartition(":")
            assert host == pod_dns_name(job, 0), (
                f"pod {index}: the rendezvous endpoint's host {host!r} is not pod 0's DNS name "
                f"{pod_dns_name(job, 0)!r}, the only name the local cluster maps to 127.0.0.1"
            )
            parsed.append(args)
    except AssertionError as error:
        return LocalWorld(False, f"the manifests cannot be run: {error}", time.monotonic() - start)

    workdir = tempfile.mkdtemp(prefix="local-k8s-")
    script = os.path.join(workdir, "train.py")
    with open(script, "w") as f:
        f.write(TRAIN_SCRIPT)
    out = os.path.join(workdir, "out")
    os.mkdir(out)
    port = free_port()
    base = {k: v for k, v in os.environ.items() if not k.startswith(_HIDDEN)}
    # TMPDIR: torchrun's log folders (torchelastic_*) go into the workdir, removed below
    base.update(OMP_NUM_THREADS="1", LOCAL_WORLD_OUT=out, TMPDIR=workdir)
    processes, logs = [], []
    try:
        for index, args in enumerate(parsed):
            argv = [
                sys.executable, "-m", "torch.distributed.run",
                f"--nnodes={args.nnodes}", "--nproc-per-node=1",
                "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}", f"--rdzv-id={args.rdzv_id}",
                f"--max-restarts={args.max_restarts}", "--local-addr=127.0.0.1", "--monitor-interval=0.1",
                script,
            ]  # fmt: skip
            log = open(os.path.join(workdir, f"pod-{index}.log"), "w+")  # noqa: SIM115 (closed below)
            logs.append(log)
            env = dict(base, JOB_COMPLETION_INDEX=str(index))
            processes.append(
                subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            )
        deadline = start + timeout_s
        for process in processes:
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                break
        seconds = time.monotonic() - start
        timed_out = any(p.poll() is None for p in processes)
        _kill_world(processes, out)
        texts = {}
        for index, log in enumerate(logs):
            log.seek(0)
            texts[index] = log.read()[-3000:]
        ranks = []
        for name in sorted(os.listdir(out)):
            if name.endswith(".json"):
                with open(os.path.join(out, name)) as f:
                    ranks.append(json.load(f))
        codes = [p.returncode for p in processes]
        return LocalWorld(*_verdict(nodes, ranks, codes, timed_out, timeout_s), seconds, ranks, texts)
    finally:
        for log in logs:
            log.close()
        _kill_world(processes, out)
        shutil.rmtree(workdir, ignore_errors=True)


def _kill_world(processes: list[subprocess.Popen], marker: str) -> None:
    """Kill every process of the local world: the torchrun agents (each its own session) and
    their workers, which torchrun starts in sessions of their own, so they are found by the
    marker every one of them inherits in its environment (LOCAL_WORLD_OUT=<marker>)."""
    for process in processes:
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
    for pid in system.processes_with_environment(f"LOCAL_WORLD_OUT={marker}"):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    for process in processes:
        process.wait()


def _verdict(nodes: int, ranks: list[dict], codes: list[int], timed_out: bool, timeout_s: float) -> tuple[bool, str]:
    if timed_out:
        return False, f"the {nodes} pods did not finish within {timeout_s:.0f} s (killed); exit codes {codes}"
    if any(codes):
        return False, f"torchrun exited with {codes} (pod i at index i)"
    want_sum = nodes * (nodes + 1) / 2
    if sorted(r["rank"] for r in ranks) != list(range(nodes)):
        return False, f"expected one record from each of ranks 0..{nodes - 1}, got ranks {[r['rank'] for r in ranks]}"
    if any(r["world_size"] != nodes or r["sum"] != want_sum for r in ranks):
        return False, f"expected one world of {nodes} ranks summing to {want_sum}, got {ranks}"
    if sorted(r["pod"] for r in ranks) != list(range(nodes)):
        return False, f"expected one rank in each pod 0..{nodes - 1}, got pods {[r['pod'] for r in ranks]}"
    return True, f"{nodes} pods formed one world of {nodes} ranks; the all-reduce gave {want_sum}"
